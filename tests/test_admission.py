"""Device admission: a runtime's probe rejects devices; the rest stay usable and densely numbered."""
import pytest
from fakes import FakePlugin, HostRuntime, installed

import anydevice as ad
from anydevice.errors import DeviceUnavailableError
from anydevice.runtime import devices as _backend


class ProbingRuntime(HostRuntime):
    """Four devices; physical device 1 cannot build kernels."""

    def __init__(self, bad=(1,)):
        super().__init__(count=4)
        self.bad, self.probed = set(bad), []

    def probe(self, index):
        self.probed.append(index)
        if index in self.bad:
            raise DeviceUnavailableError(f"compiler cannot build for device {index}", hint="install a newer compiler")


def test_probe_rejects_one_device_others_renumbered():
    rt = ProbingRuntime()
    with installed(FakePlugin(types=("probed",), runtime=rt)):
        assert ad.device.device_count("probed") == 3
        assert sorted(rt.probed) == [0, 1, 2, 3]
        be = _backend.get_backend("probed")
        assert be.physical == [0, 2, 3]          # probed:1 is physical device 2
        assert ad.ones(2, device="probed:1").numpy().tolist() == [1.0, 1.0]
        [u] = ad.device.unusable_devices("probed")
        assert u["physical_index"] == 1 and "cannot build" in u["reason"] and u["hint"] == "install a newer compiler"
        with pytest.raises(ValueError, match=r"probed:3 does not exist.*left out as unusable.*cannot build.*newer compiler"):
            ad.ones(2, device="probed:3")
        # the probe runs once per device, not per use
        ad.ones(1, device="probed:0")
        assert len(rt.probed) == 4
        # other types are unaffected
        assert ad.ones(2, device="cpu").numpy().tolist() == [1.0, 1.0]


def test_all_devices_rejected_makes_type_unavailable_with_hint():
    with installed(FakePlugin(types=("allbad",), runtime=ProbingRuntime(bad=(0, 1, 2, 3)))):
        reason = ad.device.unavailable_reason("allbad")
        assert reason is not None and "no usable device" in reason and "cannot build for device 3" in reason
        assert _backend.unavailable_hint("allbad") == "install a newer compiler"
        with pytest.raises(DeviceUnavailableError, match="no usable device"):
            ad.ones(2, device="allbad")


def test_keep_unusable_env_keeps_indices(monkeypatch):
    monkeypatch.setenv("ANYDEVICE_KEEP_UNUSABLE", "1")
    with installed(FakePlugin(types=("kept",), runtime=ProbingRuntime())):
        assert ad.device.device_count("kept") == 4
        [u] = ad.device.unusable_devices("kept")
        assert u["kept_visible"] is True


def test_crashing_probe_rejects_its_device_with_cause():
    class Crashing(HostRuntime):
        def probe(self, index):
            if index == 0:
                raise RuntimeError("driver exploded")

    with installed(FakePlugin(types=("crashy",), runtime=Crashing())):
        assert ad.device.device_count("crashy") == 1
        [u] = ad.device.unusable_devices("crashy")
        assert "RuntimeError: driver exploded" in u["reason"]
