import sys

from offcpu.cli import main

sys.exit(main())
