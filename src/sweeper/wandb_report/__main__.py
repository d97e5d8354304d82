"""``python -m sweeper.wandb_report <sweep_dir> [--publish]``: the W&B comparison report (see
:func:`sweeper.wandb_report.cli.main`)."""

import sys

from sweeper.wandb_report.cli import main

sys.exit(main())
