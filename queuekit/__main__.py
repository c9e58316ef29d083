import sys

from queuekit.cli import main

sys.exit(main())
