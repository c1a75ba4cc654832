"""How many thread-block clusters of one size a device holds at once.

The kernels run a persistent grid: each cluster takes its share of the output tiles up front
(every ``max_clusters``-th tile), so a cluster that waits for an SM to come free runs its whole
share after the others have run theirs, and the kernel takes up to twice as long. The grid
must therefore be resident at once. A cluster's CTAs are placed in one GPC, and a GPC whose
SM count is not a multiple of the cluster size leaves the rest of its SMs idle: a 132-SM
Hopper holds fewer than 132 / 4 clusters of 4 CTAs at a time. The driver's occupancy
calculator says how many, for a kernel whose shared memory takes a whole SM per CTA, as the
conv kernels' does.
"""

from __future__ import annotations

import functools

import torch

from .cuda_context import on_device

__all__ = ["resident_clusters"]

# An empty kernel for the occupancy calculator: what bounds clusters of CTAs that each take a
# whole SM is where the SMs are, not the kernel (its shared memory is set to the device's
# per-block maximum before the query). PTX for sm_90, which later GPUs compile as well.
_PROBE_PTX = b"""
.version 7.8
.target sm_90
.address_size 64
.visible .entry cluster_probe()
{
    ret;
}
"""
_PROBE_THREADS = 128


def resident_clusters(device_index: int, cluster_size: int) -> int:
    """The most clusters of ``cluster_size`` CTAs, each taking a whole SM, that CUDA device
    ``device_index`` runs at once: the driver's answer, looked up once per device and size,
    at most the SM count over the cluster size. That bound itself for single CTAs, and
    where the driver cannot answer (no cluster launches, an old driver)."""
    num_sms = torch.cuda.get_device_properties(device_index).multi_processor_count
    bound = num_sms // cluster_size
    if cluster_size == 1:
        return bound
    resident = _driver_resident_clusters(device_index, cluster_size)
    return bound if resident is None or resident < 1 else min(resident, bound)


@functools.lru_cache(maxsize=None)
def _driver_resident_clusters(device_index: int, cluster_size: int) -> int | None:
    """``cuOccupancyMaxActiveClusters`` of the probe kernel with clusters of ``cluster_size``
    CTAs and a whole SM's shared memory each; None on any driver error."""
    from cuda.bindings import driver, runtime

    err, smem = runtime.cudaDeviceGetAttribute(
        runtime.cudaDeviceAttr.cudaDevAttrMaxSharedMemoryPerBlockOptin, device_index
    )
    if err != runtime.cudaError_t.cudaSuccess:
        return None
    # A capture under way (the call's first run inside a CUDA graph) must not forbid the
    # module load: relaxed mode for this thread while it runs.
    relaxed = runtime.cudaStreamCaptureMode.cudaStreamCaptureModeRelaxed
    _, mode = runtime.cudaThreadExchangeStreamCaptureMode(relaxed)
    try:
        with on_device(device_index):
            err, module = driver.cuModuleLoadData(_PROBE_PTX)
            if err != driver.CUresult.CUDA_SUCCESS:
                return None
            try:
                return _max_active_clusters(driver, module, cluster_size, smem)
            finally:
                driver.cuModuleUnload(module)
    finally:
        runtime.cudaThreadExchangeStreamCaptureMode(mode)


def _max_active_clusters(driver, module, cluster_size: int, smem: int) -> int | None:
    """The occupancy calculator's clusters for the probe kernel of ``module``; None on an
    error."""
    err, func = driver.cuModuleGetFunction(module, b"cluster_probe")
    if err != driver.CUresult.CUDA_SUCCESS:
        return None
    size_attr = driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
    (err,) = driver.cuFuncSetAttribute(func, size_attr, smem)
    if err != driver.CUresult.CUDA_SUCCESS:
        return None
    cluster = driver.CUlaunchAttribute()
    cluster.id = driver.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
    cluster.value.clusterDim.x, cluster.value.clusterDim.y, cluster.value.clusterDim.z = (
        cluster_size, 1, 1,
    )  # fmt: skip
    config = driver.CUlaunchConfig()
    config.gridDimX, config.gridDimY, config.gridDimZ = cluster_size, 1, 1
    config.blockDimX, config.blockDimY, config.blockDimZ = _PROBE_THREADS, 1, 1
    config.sharedMemBytes = smem
    config.attrs = [cluster]
    config.numAttrs = 1
    err, clusters = driver.cuOccupancyMaxActiveClusters(func, config)
    return int(clusters) if err == driver.CUresult.CUDA_SUCCESS else None
