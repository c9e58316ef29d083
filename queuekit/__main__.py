import sys

from queuekit.cli import main

if __name__ == "__main__":  # also imported as __mp_main__ by worker processes
    sys.exit(main())
