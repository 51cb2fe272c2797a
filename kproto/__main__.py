import sys

from kproto.cli.main import main

sys.exit(main())
