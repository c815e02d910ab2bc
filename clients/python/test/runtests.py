"""Run the unittest modules given (or test_*.py here) and print
"RESULT <passed> <failed>" as the last line (errors, failures and
unexpected successes count as failed; skipped tests count as neither)."""

import os
import sys
import unittest

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)


def main(argv):
    loader = unittest.TestLoader()
    names = argv or sorted(f[:-3] for f in os.listdir(here) if f.startswith("test_") and f.endswith(".py"))
    suite = unittest.TestSuite(loader.loadTestsFromName(n) for n in names)
    result = unittest.TextTestRunner(stream=sys.stdout, verbosity=2).run(suite)
    failed = len(result.failures) + len(result.errors) + len(result.unexpectedSuccesses)
    passed = result.testsRun - failed - len(result.skipped)
    print(f"RESULT {passed} {failed}", flush=True)
    return 0 if failed == 0 and result.testsRun > 0 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
