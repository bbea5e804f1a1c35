"""``python -m tests.faults.nemesis``: see :mod:`tests.faults.nemesis.run`."""

import sys

from tests.faults.nemesis.run import main

sys.exit(main())
