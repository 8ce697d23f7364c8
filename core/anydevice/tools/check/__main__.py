"""``python -m anydevice.tools.check`` (also ``python -m anydevice.check``): the command, and the worker processes it starts (``--worker``)."""
import sys

from anydevice.tools.check import main

sys.exit(main())
