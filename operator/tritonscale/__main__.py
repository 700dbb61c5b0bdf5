import sys

from tritonscale.cli import main

sys.exit(main())
