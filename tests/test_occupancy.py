"""CPU tests of ``occupancy.resident_clusters``: the SM bound, the driver's answer through a
stand-in driver, and the fallback where the driver cannot answer (the GPU side:
``test_occupancy_sm90.py``)."""

from __future__ import annotations

import contextlib
from types import SimpleNamespace

import pytest
from cuda.bindings import driver, runtime

from cute_conv import occupancy


@pytest.fixture
def device_of_132_sms(monkeypatch):
    props = SimpleNamespace(multi_processor_count=132)
    monkeypatch.setattr(occupancy.torch.cuda, "get_device_properties", lambda index: props)
    monkeypatch.setattr(occupancy, "on_device", lambda index: contextlib.nullcontext())
    occupancy._driver_resident_clusters.cache_clear()
    yield
    occupancy._driver_resident_clusters.cache_clear()


class FakeDriver:
    """The driver calls the query makes, answering ``clusters`` and recording what it was
    asked (the probe's launch configuration, whether its module was unloaded)."""

    def __init__(self, monkeypatch, clusters: int, occupancy_error=None):
        self.clusters, self.occupancy_error = clusters, occupancy_error
        self.configs, self.shared, self.unloaded = [], [], []
        ok = driver.CUresult.CUDA_SUCCESS
        monkeypatch.setattr(
            runtime, "cudaDeviceGetAttribute",
            lambda attr, index: (runtime.cudaError_t.cudaSuccess, 232448),
        )  # fmt: skip
        monkeypatch.setattr(
            runtime, "cudaThreadExchangeStreamCaptureMode",
            lambda mode: (runtime.cudaError_t.cudaSuccess, mode),
        )  # fmt: skip
        monkeypatch.setattr(driver, "cuModuleLoadData", lambda ptx: (ok, "module"))
        monkeypatch.setattr(driver, "cuModuleGetFunction", lambda module, name: (ok, "probe"))
        monkeypatch.setattr(driver, "cuFuncSetAttribute", self._set_attribute)
        monkeypatch.setattr(driver, "cuOccupancyMaxActiveClusters", self._max_active_clusters)
        monkeypatch.setattr(driver, "cuModuleUnload", lambda module: self.unloaded.append(module))

    def _set_attribute(self, func, attribute, value):
        self.shared.append((attribute, value))
        return (driver.CUresult.CUDA_SUCCESS,)

    def _max_active_clusters(self, func, config):
        self.configs.append(config)
        return (self.occupancy_error or driver.CUresult.CUDA_SUCCESS, self.clusters)


def test_single_ctas_are_bounded_by_the_sms_alone(device_of_132_sms, monkeypatch):
    fake = FakeDriver(monkeypatch, clusters=7)
    assert occupancy.resident_clusters(0, 1) == 132
    assert fake.configs == [], "no driver query for clusters of one CTA"


def test_the_driver_bounds_clusters_that_gpcs_cannot_all_hold(device_of_132_sms, monkeypatch):
    fake = FakeDriver(monkeypatch, clusters=30)
    assert occupancy.resident_clusters(0, 4) == 30  # not 132 // 4 = 33
    (config,) = fake.configs
    (cluster,) = config.attrs
    assert cluster.id == driver.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
    assert (cluster.value.clusterDim.x, cluster.value.clusterDim.y) == (4, 1)
    assert config.numAttrs == 1 and config.gridDimX == 4
    # A CTA takes a whole SM's shared memory, as the conv kernels' do.
    assert config.sharedMemBytes == 232448
    size_attr = driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
    assert fake.shared == [(size_attr, 232448)]
    assert fake.unloaded == ["module"]
    assert occupancy.resident_clusters(0, 4) == 30
    assert len(fake.configs) == 1, "asked once per device and cluster size"


def test_the_sm_bound_stands_where_the_driver_answers_more(device_of_132_sms, monkeypatch):
    FakeDriver(monkeypatch, clusters=40)
    assert occupancy.resident_clusters(0, 4) == 33


@pytest.mark.parametrize("clusters, error", [(0, None), (5, "error")])
def test_the_sm_bound_stands_where_the_driver_cannot_answer(
    device_of_132_sms, monkeypatch, clusters, error
):
    occupancy_error = None if error is None else driver.CUresult.CUDA_ERROR_INVALID_VALUE
    fake = FakeDriver(monkeypatch, clusters=clusters, occupancy_error=occupancy_error)
    assert occupancy.resident_clusters(0, 2) == 66
    assert fake.unloaded == ["module"]


def test_no_driver_leaves_the_sm_bound(device_of_132_sms, monkeypatch):
    monkeypatch.setattr(
        runtime, "cudaDeviceGetAttribute",
        lambda attr, index: (runtime.cudaError_t.cudaErrorInsufficientDriver, None),
    )  # fmt: skip
    assert occupancy.resident_clusters(0, 8) == 16
