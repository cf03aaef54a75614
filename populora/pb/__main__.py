"""`python -m populora.pb [--force]`: compile the gRPC stubs."""

import sys

from populora.pb import generate

generate(force="--force" in sys.argv)
print("gRPC stubs generated")
