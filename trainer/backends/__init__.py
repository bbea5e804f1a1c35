"""Model backends the learner trains (Hugging Face transformers today)."""
