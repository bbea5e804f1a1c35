"""Running the services of a training job: child processes and the local stack.

Upstream's ``agentlightning.execution`` held the execution strategies; agl-stream's ``Trainer``
starts the local stack instead, so their names are refused with that replacement.
"""

from typing import TYPE_CHECKING

from agl_stream._porting import module_getattr

if not TYPE_CHECKING:  # upstream's names in this module, kept or refused: the tables in agl_stream/_porting.py
    __getattr__ = module_getattr(__name__)
