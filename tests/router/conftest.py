from tests.support.routerctl import runtime_dir  # noqa: F401 - fixture
