import sys

from memhoncho.cli import main

sys.exit(main())
