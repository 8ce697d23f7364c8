"""``python -m anydevice.check``: the command, and the worker processes it starts (``--worker``)."""
import sys

from anydevice.check import main

sys.exit(main())
