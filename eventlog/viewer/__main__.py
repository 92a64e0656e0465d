"""``python -m eventlog.viewer PATH``: the web viewer without the command line."""

import sys

from eventlog.viewer.server import main

sys.exit(main())
