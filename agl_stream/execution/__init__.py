"""Running the services of a training job: child processes and the local stack."""
