import pytest
from fakes import FakePlugin, HostRuntime, RaisingPlugin, installed

import anydevice as ad
from anydevice.errors import DeviceUnavailableError


def test_cpu_strings_resolve_to_one_device():
    assert ad.devices.as_device("cpu") is ad.devices.as_device("cpu:0") is ad.devices.as_device(" CPU : 0 ")
    assert str(ad.devices.as_device("cpu")) == "cpu:0"


@pytest.mark.parametrize("bad", ["cpu:", ":0", "cpu:-1", "cpu:x", "cpu:0:1", "", "c p u"])
def test_malformed_device_strings(bad):
    with pytest.raises(ValueError, match="invalid device string"):
        ad.devices.as_device(bad)


def test_unknown_type_lists_available_and_suggests():
    with pytest.raises(ValueError) as e:
        ad.devices.as_device("cpuu")
    msg = str(e.value)
    assert "unknown device type 'cpuu'" in msg and "Available: " in msg and "cpu" in msg
    assert "Did you mean 'cpu'" in msg


def test_index_out_of_range_names_count():
    with pytest.raises(ValueError, match=r"cpu has 1 device\(s\)"):
        ad.devices.as_device("cpu:3")


def test_non_string_device():
    with pytest.raises(TypeError, match="device must be"):
        ad.devices.as_device(3.5)


def test_set_get_and_guard():
    with installed(FakePlugin(types=("fakedev",))):
        assert ad.get_device() == "cpu:0"
        with ad.device_guard("fakedev:1") as d:
            assert ad.get_device() == "fakedev:1"
            assert ad.zeros((2,)).device is d
        assert ad.get_device() == "cpu:0"
        ad.set_device("fakedev")
        try:
            assert ad.get_device() == "fakedev:0"
        finally:
            ad.set_device("cpu")


def test_alias_resolves_to_type():
    with installed(FakePlugin(types=("accel",), aliases=("acc",))):
        assert ad.devices.as_device("acc:1") is ad.devices.as_device("accel:1")


def test_visible_devices_env(monkeypatch):
    monkeypatch.setenv("ANYDEVICE_VISDEV_VISIBLE_DEVICES", "1")
    rt = HostRuntime(count=3)
    with installed(FakePlugin(types=("visdev",), runtime=rt)):
        assert ad.device.device_count("visdev") == 1
        x = ad.asarray([1.0, 2.0], device="visdev:0")
        assert x._buf.block.index == 1  # physical device 1
        with pytest.raises(ValueError, match="visdev has 1 device"):
            ad.devices.as_device("visdev:1")


def test_visible_devices_env_invalid(monkeypatch):
    monkeypatch.setenv("ANYDEVICE_VISBAD_VISIBLE_DEVICES", "7")
    with installed(FakePlugin(types=("visbad",), runtime=HostRuntime(count=2))):
        with pytest.raises(DeviceUnavailableError, match="names device '7'"):
            ad.devices.as_device("visbad")


def test_unavailable_type_reports_reason():
    too_old = DeviceUnavailableError("vendor driver 1.2 is too old: install driver >= 2.0")
    with installed(RaisingPlugin(too_old, types=("olddrv",))):
        with pytest.raises(DeviceUnavailableError, match="install driver >= 2.0"):
            ad.devices.as_device("olddrv")
        assert "too old" in ad.device.unavailable_reason("olddrv")
        assert ad.device.device_count("olddrv") == 0
        with pytest.raises(ValueError, match="Installed but unavailable: .*too old"):
            ad.devices.as_device("nosuchtype")


def test_device_api_lists():
    assert "cpu" in ad.device.get_all_device_type()
    assert "cpu:0" in ad.device.get_available_device()
    assert "cpu" not in ad.device.get_all_custom_device_type()
    props = ad.device.get_device_properties("cpu")
    assert props["name"] == "cpu" and "float32" in props["dtypes"]
