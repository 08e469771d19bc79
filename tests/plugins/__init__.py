"""Plugin modules used by the tests of the extension points (import name ``plugins.*``)."""
