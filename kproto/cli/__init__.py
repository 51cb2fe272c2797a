"""The ``kproto`` command line. Each job lives in its own module with a ``register(subparsers)``."""
