"""``python -m memhoncho.cli``, as before cli/ became a package (tests and scripts run it)."""

import sys

from memhoncho.cli import main

sys.exit(main())
