"""Runs the package's unittest files and ends with the lines tests/run_tests.sh counts:
"K skipped" (when any) and "N passed, M failed". Usage: python3 python/tests/run.py [FILES]."""
import os
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))


def main(argv):
    loader = unittest.TestLoader()
    if argv:
        suite = unittest.TestSuite(loader.loadTestsFromName(os.path.splitext(
            os.path.basename(a))[0]) for a in argv)
    else:
        suite = loader.discover(HERE, pattern="test_*.py", top_level_dir=HERE)
    sys.path.insert(0, HERE)
    result = unittest.TextTestRunner(stream=sys.stdout, verbosity=2).run(suite)
    # a test whose subtests fail is one failed test, not one per subtest
    failed = len({getattr(test, "test_case", test).id() for test in
                  [t for t, _ in result.failures + result.errors] + result.unexpectedSuccesses})
    skipped = len(result.skipped)
    passed = result.testsRun - failed - skipped
    if skipped:
        print(f"{skipped} skipped")
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
