import sys

from .rig import main

sys.exit(main())
