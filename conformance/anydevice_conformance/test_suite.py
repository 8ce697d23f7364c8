"""The conformance tests, parametrized by the plugin (``--anydevice-device`` selects devices)."""


def test_conformance(anydevice_case):
    from anydevice_conformance.pytest_plugin import run_case

    run_case(anydevice_case)
