"""``python -m sweeper.report <sweep_dir>``: rebuild the report of a sweep directory (see :func:`main`)."""

import sys

from sweeper.report import main

sys.exit(main())
