"""``python -m otel_bridge`` runs the command line."""

import sys

from otel_bridge.cli import main

sys.exit(main())
