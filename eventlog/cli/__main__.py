"""``python -m eventlog.cli``: the ``ckptlog`` command."""

import sys

from eventlog.cli.runner import main

sys.exit(main())
