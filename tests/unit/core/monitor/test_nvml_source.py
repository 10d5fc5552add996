"""Behaviour of NvmlSource against a fake pynvml that raises the real errors."""

from __future__ import annotations

import sys

import pynvml
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.core.monitor.nvml_source import NvmlSource
from app.core.monitor.samples import DeviceState, GpuSample
from app.core.monitor.source import SourceUnavailable
from tests.fakes.fake_pynvml import NOT_AVAILABLE, FakeGpu, FakeNvml, GiB, MiB

NA = "n/a (not supported)"
NO_PERM = "n/a (no permission)"


def opened(*gpus: FakeGpu, **kwargs) -> tuple[NvmlSource, FakeNvml]:
    fake = FakeNvml(gpus, **kwargs)
    source = NvmlSource(nvml=fake)
    source.open()
    return source, fake


def only(samples: tuple[GpuSample, ...]) -> GpuSample:
    assert len(samples) == 1
    return samples[0]


def by_pid(sample: GpuSample) -> dict:
    return {p.pid: p for p in sample.processes}


# --------------------------------------------------------------------- open()

@pytest.mark.parametrize(
    ("code", "reason", "reason_code"),
    [
        (pynvml.NVML_ERROR_LIBRARY_NOT_FOUND,
         "NVIDIA driver not found (libnvidia-ml is not installed)", "no_library"),
        (pynvml.NVML_ERROR_DRIVER_NOT_LOADED, "NVIDIA driver not loaded", "driver_not_loaded"),
        (pynvml.NVML_ERROR_NO_PERMISSION, "No permission to access the NVIDIA driver", "no_permission"),
    ],
)
def test_open_maps_init_errors(code, reason, reason_code):
    source = NvmlSource(nvml=FakeNvml([FakeGpu()], init_error=code))
    with pytest.raises(SourceUnavailable) as info:
        source.open()
    assert info.value.reason == reason
    assert info.value.code == reason_code
    assert str(info.value) == reason


def test_open_no_library_scenario():
    with pytest.raises(SourceUnavailable) as info:
        NvmlSource(nvml=FakeNvml.no_library()).open()
    assert info.value.code == "no_library"


def test_open_driver_not_loaded_scenario():
    with pytest.raises(SourceUnavailable) as info:
        NvmlSource(nvml=FakeNvml.driver_not_loaded()).open()
    assert info.value.code == "driver_not_loaded"


def test_open_version_mismatch_says_reboot():
    fake = FakeNvml([FakeGpu()], init_error=pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH)
    with pytest.raises(SourceUnavailable) as info:
        NvmlSource(nvml=fake).open()
    assert info.value.code == "version_mismatch"
    assert "mismatch" in info.value.reason and "reboot" in info.value.reason


def test_open_other_nvml_error_carries_its_text():
    fake = FakeNvml([FakeGpu()], init_error=pynvml.NVML_ERROR_UNKNOWN)
    with pytest.raises(SourceUnavailable) as info:
        NvmlSource(nvml=fake).open()
    assert "Unknown Error" in info.value.reason


def test_open_oserror_from_library_loading_is_no_library():
    fake = FakeNvml([FakeGpu()], init_error=OSError("libnvidia-ml.so.1: wrong ELF class"))
    with pytest.raises(SourceUnavailable) as info:
        NvmlSource(nvml=fake).open()
    assert info.value.code == "no_library"
    assert "wrong ELF class" in info.value.reason


def test_open_without_pynvml_installed_is_no_library(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # makes `import pynvml` fail
    with pytest.raises(SourceUnavailable) as info:
        NvmlSource().open()
    assert info.value.code == "no_library"


def test_open_zero_devices_is_no_gpu_and_shuts_down():
    fake = FakeNvml([])
    with pytest.raises(SourceUnavailable) as info:
        NvmlSource(nvml=fake).open()
    assert (info.value.reason, info.value.code) == ("No NVIDIA GPU found", "no_gpu")
    assert fake.calls["nvmlShutdown"] == 1
    assert fake.refcount == 0


def test_open_failure_after_init_shuts_down():
    fake = FakeNvml([FakeGpu()])
    fake.fail["nvmlDeviceGetCount"] = pynvml.NVML_ERROR_UNKNOWN
    source = NvmlSource(nvml=fake)
    with pytest.raises(SourceUnavailable):
        source.open()
    assert fake.refcount == 0
    source.close()  # nothing left to shut down
    assert fake.calls["nvmlShutdown"] == 1


def test_read_before_open_raises_source_unavailable():
    with pytest.raises(SourceUnavailable):
        NvmlSource(nvml=FakeNvml([FakeGpu()])).read()


# ------------------------------------------------- init once, handles reused

def test_init_once_and_handles_fetched_once_across_reads():
    source, fake = opened(FakeGpu(), FakeGpu(), FakeGpu())
    source.open()  # a second open is a no-op
    for _ in range(10):
        assert len(source.read()) == 3
    assert fake.calls["nvmlInit"] == 1
    assert fake.calls["nvmlDeviceGetCount"] == 1
    assert fake.calls["nvmlDeviceGetHandleByIndex"] == 3
    # static fields are not re-read per tick
    assert fake.calls["nvmlDeviceGetName"] == 3
    assert fake.calls["nvmlDeviceGetUUID"] == 3
    assert fake.calls["nvmlDeviceGetEnforcedPowerLimit"] == 3
    assert fake.calls["nvmlSystemGetDriverVersion"] == 1
    # dynamic ones are, once per device per tick (+1 memory probe at open)
    assert fake.calls["nvmlDeviceGetUtilizationRates"] == 30
    assert fake.calls["nvmlDeviceGetMemoryInfo_v2"] == 33


def test_close_shuts_down_once_and_is_idempotent():
    source, fake = opened(FakeGpu())
    source.close()
    source.close()
    assert fake.calls["nvmlShutdown"] == 1
    assert fake.refcount == 0
    with pytest.raises(SourceUnavailable):
        source.read()


def test_close_without_open_does_nothing():
    fake = FakeNvml([FakeGpu()])
    NvmlSource(nvml=fake).close()
    assert fake.calls["nvmlShutdown"] == 0


def test_reopen_after_close_reads_again():
    source, fake = opened(FakeGpu(used=3 * GiB))
    source.close()
    source.open()
    assert only(source.read()).memory_used == 3 * GiB
    assert fake.calls["nvmlInit"] == 2
    assert fake.refcount == 1


def test_context_manager_opens_and_closes():
    fake = FakeNvml([FakeGpu()])
    with NvmlSource(nvml=fake) as source:
        assert only(source.read()).state is DeviceState.OK
    assert fake.calls["nvmlShutdown"] == 1


def test_source_name_is_nvml():
    assert NvmlSource.name == "nvml"
    assert NvmlSource(nvml=FakeNvml()).wants_host_details is True


# ---------------------------------------------------------- driver_version()

@pytest.mark.parametrize("raw", ["550.54.14", b"550.54.14"])
def test_driver_version_is_a_string(raw):
    source, _ = opened(FakeGpu(), driver_version=raw)
    assert source.driver_version() == "550.54.14"


def test_driver_version_none_when_it_fails():
    source, fake = opened(FakeGpu(), driver_version=None)
    assert source.driver_version() is None
    assert only(source.read()).state is DeviceState.OK


def test_driver_version_none_before_open():
    assert NvmlSource(nvml=FakeNvml([FakeGpu()])).driver_version() is None


# ------------------------------------------------------------------- static

def test_static_fields():
    gpu = FakeGpu(name="NVIDIA GeForce RTX 4090", uuid="GPU-abc", total=24 * GiB, power_limit_mw=450_000)
    source, _ = opened(gpu)
    sample = only(source.read())
    assert sample.index == 0
    assert sample.name == "NVIDIA GeForce RTX 4090"
    assert sample.uuid == "GPU-abc"
    assert sample.memory_total == 24 * GiB
    assert sample.power_limit == 450.0
    assert sample.mig_index is None and sample.display_id == "0"


def test_name_failure_falls_back_to_index_name():
    gpu = FakeGpu().not_supported("nvmlDeviceGetName")
    source, _ = opened(FakeGpu(), gpu)
    assert source.read()[1].name == "GPU 1"
    assert source.read()[1].state is DeviceState.OK


def test_power_limit_not_supported_is_noted():
    source, _ = opened(FakeGpu().not_supported("nvmlDeviceGetEnforcedPowerLimit"))
    sample = only(source.read())
    assert sample.power_limit is None
    assert sample.notes["power_limit"] == NA
    assert sample.state is DeviceState.OK


# ------------------------------------------------------------------- memory

def test_memory_v2_exact_bytes_reserved_kept_apart():
    gpu = FakeGpu(total=16 * GiB, used=5 * GiB + 123, reserved=300 * MiB)
    source, _ = opened(gpu)
    sample = only(source.read())
    assert sample.memory_total == 16 * GiB
    assert sample.memory_used == 5 * GiB + 123
    assert sample.memory_reserved == 300 * MiB
    assert sample.memory_free == 16 * GiB - (5 * GiB + 123) - 300 * MiB
    assert "memory" not in sample.notes


def test_memory_follows_changes_between_reads():
    gpu = FakeGpu(total=8 * GiB, used=1 * GiB, reserved=0)
    source, _ = opened(gpu)
    assert only(source.read()).memory_used == 1 * GiB
    gpu.used = 6 * GiB
    sample = only(source.read())
    assert (sample.memory_used, sample.memory_free) == (6 * GiB, 2 * GiB)


def test_memory_v2_missing_in_old_driver_falls_back_to_v1_for_good():
    gpu = FakeGpu(total=8 * GiB, used=2 * GiB, reserved=512 * MiB)
    fake = FakeNvml([gpu])
    fake.missing_functions.add("nvmlDeviceGetMemoryInfo_v2")
    source = NvmlSource(nvml=fake)
    source.open()
    for _ in range(5):
        sample = only(source.read())
    # v1 folds reserved into used and has no reserved figure
    assert sample.memory_used == 2 * GiB + 512 * MiB
    assert sample.memory_free == 8 * GiB - 2 * GiB - 512 * MiB
    assert sample.memory_reserved is None
    assert sample.memory_total == 8 * GiB
    assert fake.calls["nvmlDeviceGetMemoryInfo_v2"] == 1  # tried once, at open
    assert fake.calls["nvmlDeviceGetMemoryInfo"] == 6
    assert "memory" not in sample.notes


@pytest.mark.parametrize(
    "code", [pynvml.NVML_ERROR_NOT_SUPPORTED, pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH,
             pynvml.NVML_ERROR_FUNCTION_NOT_FOUND],
)
def test_memory_v2_failure_mid_run_switches_to_v1_per_device(code):
    old, new = FakeGpu(used=1 * GiB, reserved=100 * MiB), FakeGpu(used=1 * GiB, reserved=100 * MiB)
    source, fake = opened(old, new)
    old.fail_with("nvmlDeviceGetMemoryInfo_v2", code)
    for _ in range(3):
        first, second = source.read()
    assert first.memory_used == 1 * GiB + 100 * MiB and first.memory_reserved is None
    assert second.memory_used == 1 * GiB and second.memory_reserved == 100 * MiB
    assert first.state is DeviceState.OK
    assert old.calls_after_lost == 0
    # one failing v2 call on the old device, v2 every tick on the new one
    assert fake.calls["nvmlDeviceGetMemoryInfo_v2"] == 2 + 1 + 3
    assert fake.calls["nvmlDeviceGetMemoryInfo"] == 3


def test_memory_not_supported_at_all_gives_none_and_note():
    gpu = FakeGpu().not_supported("nvmlDeviceGetMemoryInfo_v2", "nvmlDeviceGetMemoryInfo")
    gpu.add_process(10, 64 * MiB)
    source, fake = opened(gpu)
    for _ in range(3):
        sample = only(source.read())
    assert sample.state is DeviceState.OK
    assert (sample.memory_total, sample.memory_used, sample.memory_free, sample.memory_reserved) == (
        None, None, None, None)
    assert sample.notes["memory"] == NA
    assert sample.memory_fraction is None
    # the rest still reports
    assert sample.temperature == 55.0
    assert by_pid(sample)[10].gpu_memory == 64 * MiB
    # and the unsupported call is not repeated every tick
    assert fake.calls["nvmlDeviceGetMemoryInfo"] == 1


# ---------------------------------------------- utilisation, temperature, power

def test_device_level_values():
    gpu = FakeGpu(util_gpu=87, util_memory=33, temperature=71, power_mw=215_250)
    source, _ = opened(gpu)
    sample = only(source.read())
    assert sample.utilization_gpu == 87.0
    assert sample.utilization_memory == 33.0
    assert sample.temperature == 71.0
    assert sample.power_draw == pytest.approx(215.25)
    assert sample.state is DeviceState.OK and sample.message is None and sample.notes == {}


FIELDS = [
    ("nvmlDeviceGetUtilizationRates", ("utilization_gpu", "utilization_memory")),
    ("nvmlDeviceGetTemperature", ("temperature",)),
    ("nvmlDeviceGetPowerUsage", ("power_draw",)),
]


@pytest.mark.parametrize(("function", "fields"), FIELDS)
def test_field_not_supported_is_none_with_note_and_not_asked_again(function, fields):
    gpu = FakeGpu(used=3 * GiB).not_supported(function)
    source, fake = opened(gpu)
    for _ in range(4):
        sample = only(source.read())
    assert sample.state is DeviceState.OK
    for field in fields:
        assert getattr(sample, field) is None
        assert sample.notes[field] == NA
    assert sample.memory_used == 3 * GiB
    others = {f for _, fs in FIELDS for f in fs} - set(fields)
    assert all(getattr(sample, f) is not None for f in others)
    assert fake.calls[function] == 1


@pytest.mark.parametrize(("function", "fields"), FIELDS)
def test_field_no_permission_is_none_with_note(function, fields):
    gpu = FakeGpu().no_permission(function)
    source, _ = opened(gpu)
    sample = only(source.read())
    assert sample.state is DeviceState.OK
    for field in fields:
        assert getattr(sample, field) is None
        assert sample.notes[field] == NO_PERM
    assert sample.memory_used == 1 * GiB
    # permission can come back: the field is asked again and then reported
    del gpu.fail[function]
    sample = only(source.read())
    assert all(getattr(sample, f) is not None for f in fields)
    assert not any(f in sample.notes for f in fields)


def test_unknown_error_on_one_field_leaves_that_field_unknown_and_the_rest_exact():
    bad = FakeGpu(used=3 * GiB).fail_with("nvmlDeviceGetTemperature", pynvml.NVML_ERROR_UNKNOWN)
    good = FakeGpu(used=2 * GiB)
    source, _ = opened(bad, good)
    first, second = source.read()
    assert first.state is DeviceState.OK
    assert first.temperature is None and "Unknown Error" in first.notes["temperature"]
    assert first.memory_used == 3 * GiB  # the other fields are still read
    assert second.state is DeviceState.OK and second.memory_used == 2 * GiB
    # transient: once the error goes away the field reports again
    del bad.fail["nvmlDeviceGetTemperature"]
    first, _ = source.read()
    assert first.state is DeviceState.OK and first.temperature == 55.0
    assert "temperature" not in first.notes


def test_handle_lookup_error_at_open_reports_error_without_calls():
    bad = FakeGpu().fail_with("nvmlDeviceGetHandleByIndex", pynvml.NVML_ERROR_UNKNOWN)
    source, _ = opened(FakeGpu(), bad)
    calls = bad.calls
    for _ in range(3):
        first, second = source.read()
    assert first.state is DeviceState.OK
    assert second.state is DeviceState.ERROR and "Unknown Error" in second.message
    assert second.index == 1
    assert bad.calls == calls


def test_transient_memory_error_at_open_does_not_condemn_the_device():
    gpu = FakeGpu(used=2 * GiB).fail_with("nvmlDeviceGetMemoryInfo_v2", pynvml.NVML_ERROR_UNKNOWN)
    source, _ = opened(gpu)
    sample = only(source.read())
    assert sample.memory_used is None and "Unknown Error" in sample.notes["memory"]
    assert sample.temperature == 55.0  # the rest of the device still reads
    del gpu.fail["nvmlDeviceGetMemoryInfo_v2"]
    sample = only(source.read())
    assert sample.state is DeviceState.OK
    assert (sample.memory_used, sample.memory_reserved) == (2 * GiB, 256 * MiB)


def test_power_limit_other_error_at_open_is_a_note():
    gpu = FakeGpu().fail_with("nvmlDeviceGetEnforcedPowerLimit", pynvml.NVML_ERROR_UNKNOWN)
    source, _ = opened(gpu)
    sample = only(source.read())
    assert sample.state is DeviceState.OK and sample.power_limit is None
    assert "Unknown Error" in sample.notes["power_limit"]


# ---------------------------------------------------------------- processes

def test_processes_merged_by_pid_with_kinds():
    gpu = FakeGpu()
    gpu.add_process(100, 512 * MiB)  # compute only
    gpu.add_process(200, None, compute=False, graphics=True)  # graphics only, WDDM-like
    gpu.add_process(300, 300 * MiB, compute=True, graphics=True)  # both, same number
    gpu.add_process(400, 100 * MiB, compute=True, graphics=True, graphics_memory=150 * MiB)
    gpu.add_process(500, None, compute=True, graphics=True, graphics_memory=70 * MiB)
    source, _ = opened(gpu)
    sample = only(source.read())
    procs = by_pid(sample)
    assert [p.pid for p in sample.processes] == [100, 300, 400, 500, 200]
    assert (procs[100].kind, procs[100].gpu_memory) == ("compute", 512 * MiB)
    assert (procs[200].kind, procs[200].gpu_memory) == ("graphics", None)
    # one allocation reported in both lists: never summed
    assert (procs[300].kind, procs[300].gpu_memory) == ("compute+graphics", 300 * MiB)
    assert procs[400].gpu_memory == 150 * MiB
    assert procs[500].gpu_memory == 70 * MiB
    assert "process_memory" not in sample.notes
    # host details are the collector's job
    assert all(p.name is None and p.user is None and p.command is None for p in sample.processes)


def test_no_processes_is_empty_tuple_without_notes():
    source, fake = opened(FakeGpu())
    sample = only(source.read())
    assert sample.processes == ()
    assert sample.notes == {}
    assert fake.calls["nvmlDeviceGetProcessUtilization"] == 0


def test_wddm_process_memory_is_none_with_note():
    gpu = FakeGpu().add_process(11, None).add_process(12, None, compute=False, graphics=True)
    source, _ = opened(gpu)
    sample = only(source.read())
    assert [p.gpu_memory for p in sample.processes] == [None, None]
    assert sample.notes["process_memory"] == "n/a (WDDM)"
    assert sample.state is DeviceState.OK


def test_raw_not_available_value_never_shows_as_a_number():
    class RawBindings(FakeNvml):
        """Bindings that pass 2**64-1 through instead of converting to None."""

        def nvmlDeviceGetComputeRunningProcesses_v3(self, handle):
            procs = super().nvmlDeviceGetComputeRunningProcesses_v3(handle)
            for p in procs:
                if p.usedGpuMemory is None:
                    p.usedGpuMemory = NOT_AVAILABLE
            return procs

    gpu = FakeGpu().add_process(11, None)
    source = NvmlSource(nvml=RawBindings([gpu]))
    source.open()
    sample = only(source.read())
    assert sample.processes[0].gpu_memory is None
    assert sample.notes["process_memory"] == "n/a (WDDM)"


def test_process_list_no_permission():
    gpu = FakeGpu(used=2 * GiB).add_process(1, 10 * MiB)
    gpu.no_permission("nvmlDeviceGetComputeRunningProcesses_v3")
    source, _ = opened(gpu)
    sample = only(source.read())
    assert sample.processes == ()
    assert sample.notes["processes"] == NO_PERM
    assert sample.state is DeviceState.OK and sample.memory_used == 2 * GiB


def test_process_list_not_supported_is_noted_and_not_asked_again():
    gpu = FakeGpu().add_process(1, 10 * MiB)
    gpu.not_supported("nvmlDeviceGetComputeRunningProcesses_v3")
    source, fake = opened(gpu)
    for _ in range(3):
        sample = only(source.read())
    assert sample.processes == ()
    assert sample.notes["processes"] == NA
    assert fake.calls["nvmlDeviceGetComputeRunningProcesses_v3"] == 1


def test_process_list_v3_missing_falls_back_to_v2_and_remembers():
    gpu = FakeGpu().add_process(42, 256 * MiB).add_process(43, 1 * MiB, compute=False, graphics=True)
    fake = FakeNvml([gpu])
    fake.missing_functions.add("nvmlDeviceGetComputeRunningProcesses_v3")
    fake.missing_functions.add("nvmlDeviceGetGraphicsRunningProcesses_v3")
    source = NvmlSource(nvml=fake)
    source.open()
    for _ in range(4):
        sample = only(source.read())
    assert {p.pid: p.gpu_memory for p in sample.processes} == {42: 256 * MiB, 43: 1 * MiB}
    assert fake.calls["nvmlDeviceGetComputeRunningProcesses_v3"] == 1
    assert fake.calls["nvmlDeviceGetComputeRunningProcesses_v2"] == 4
    assert fake.calls["nvmlDeviceGetGraphicsRunningProcesses_v2"] == 4
    assert sample.state is DeviceState.OK


def test_bindings_without_v3_names_use_unversioned_then_v2():
    class OldBindings(FakeNvml):
        """Bindings that only export the unversioned names (+ _v2)."""

        nvmlDeviceGetComputeRunningProcesses_v3 = None
        nvmlDeviceGetGraphicsRunningProcesses_v3 = None

        def nvmlDeviceGetComputeRunningProcesses(self, handle):
            return self._unversioned(
                lambda h: self._process_list("nvmlDeviceGetComputeRunningProcesses_v3", h, False), handle)

        def nvmlDeviceGetGraphicsRunningProcesses(self, handle):
            return self._unversioned(
                lambda h: self._process_list("nvmlDeviceGetGraphicsRunningProcesses_v3", h, True), handle)

    gpu = FakeGpu().add_process(7, 5 * MiB)
    fake = OldBindings([gpu])
    fake.missing_functions.add("nvmlDeviceGetComputeRunningProcesses_v3")
    fake.missing_functions.add("nvmlDeviceGetGraphicsRunningProcesses_v3")
    source = NvmlSource(nvml=fake)
    source.open()
    with pytest.raises(pynvml.NVMLLibraryMismatchError):  # what the wrapper really raises
        fake.nvmlDeviceGetComputeRunningProcesses(fake.nvmlDeviceGetHandleByIndex(0))
    for _ in range(3):
        sample = only(source.read())
    assert by_pid(sample)[7].gpu_memory == 5 * MiB
    assert fake.calls["nvmlDeviceGetComputeRunningProcesses_v2"] == 3


def test_all_process_list_versions_missing_is_not_supported():
    gpu = FakeGpu().add_process(7, 5 * MiB)
    fake = FakeNvml([gpu])
    fake.missing_functions.update({
        "nvmlDeviceGetComputeRunningProcesses_v3", "nvmlDeviceGetComputeRunningProcesses_v2",
    })
    source = NvmlSource(nvml=fake)
    source.open()
    sample = only(source.read())
    assert sample.processes == () and sample.notes["processes"] == NA
    assert sample.state is DeviceState.OK


def test_process_exiting_between_reads_disappears():
    gpu = FakeGpu().add_process(1, 10 * MiB).add_process(2, 20 * MiB)
    source, _ = opened(gpu)
    assert set(by_pid(only(source.read()))) == {1, 2}
    gpu.exit_process(1)
    assert set(by_pid(only(source.read()))) == {2}
    gpu.exit_process(2)
    assert only(source.read()).processes == ()


@settings(max_examples=100, deadline=None)
@given(
    compute=st.dictionaries(st.integers(1, 30), st.one_of(st.none(), st.integers(0, 2**40)), max_size=8),
    graphics=st.dictionaries(st.integers(1, 30), st.one_of(st.none(), st.integers(0, 2**40)), max_size=8),
)
def test_merge_property(compute, graphics):
    gpu = FakeGpu()
    gpu.compute, gpu.graphics = dict(compute), dict(graphics)
    source, _ = opened(gpu)
    sample = only(source.read())
    procs = by_pid(sample)
    assert len(procs) == len(sample.processes)  # each pid once
    assert set(procs) == set(compute) | set(graphics)
    for pid, proc in procs.items():
        kinds = [k for k, lst in (("compute", compute), ("graphics", graphics)) if pid in lst]
        assert proc.kind == "+".join(kinds)
        numbers = [lst[pid] for lst in (compute, graphics) if lst.get(pid) is not None]
        assert proc.gpu_memory == (max(numbers) if numbers else None)
    all_none = bool(procs) and all(p.gpu_memory is None for p in procs.values())
    assert ("process_memory" in sample.notes) == all_none


# ------------------------------------------------------------ per-process SM %

def test_sm_util_attached_to_listed_pids_only():
    gpu = FakeGpu().add_process(1, 10 * MiB).add_process(2, 10 * MiB).add_process(3, 10 * MiB)
    gpu.add_util_sample(1, 1_000, 40)
    gpu.add_util_sample(2, 1_100, 101)  # garbage value: discarded
    gpu.add_util_sample(99, 1_200, 70)  # not in the lists: ignored
    source, _ = opened(gpu)
    procs = by_pid(only(source.read()))
    assert procs[1].sm_util == 40.0
    assert procs[2].sm_util is None
    assert procs[3].sm_util is None  # no sample for it
    assert 99 not in procs


def test_sm_util_last_seen_timestamp_is_passed_back():
    gpu = FakeGpu().add_process(1, 10 * MiB).add_process(2, 10 * MiB)
    gpu.add_util_sample(1, 5_000, 10).add_util_sample(2, 7_000, 20).add_util_sample(99, 9_000, 1)
    source, _ = opened(gpu)
    source.read()
    source.read()
    gpu.add_util_sample(1, 12_000, 30)
    procs = by_pid(only(source.read()))
    # newest timestamp of any sample (also of ignored pids) is remembered
    assert gpu.util_requests == [0, 9_000, 9_000]
    source.read()
    assert gpu.util_requests[-1] == 12_000
    assert procs[1].sm_util == 30.0 and procs[2].sm_util == 20.0


def test_sm_util_not_found_keeps_previous_values():
    gpu = FakeGpu().add_process(1, 10 * MiB).add_util_sample(1, 100, 55)
    source, _ = opened(gpu)
    assert only(source.read()).processes[0].sm_util == 55.0
    for _ in range(3):  # no newer samples: the fake raises NVMLError_NotFound
        sample = only(source.read())
        assert sample.processes[0].sm_util == 55.0
        assert sample.state is DeviceState.OK and "sm_util" not in sample.notes
    assert gpu.util_requests == [0, 100, 100, 100]


def test_sm_util_of_exited_pid_is_dropped_and_not_resurrected():
    gpu = FakeGpu().add_process(1, 10 * MiB).add_process(2, 10 * MiB)
    gpu.add_util_sample(1, 100, 60).add_util_sample(2, 100, 70)
    source, _ = opened(gpu)
    source.read()
    gpu.exit_process(1)
    procs = by_pid(only(source.read()))
    assert set(procs) == {2} and procs[2].sm_util == 70.0
    gpu.add_process(1, 10 * MiB)  # pid reused by a new process, no new sample yet
    procs = by_pid(only(source.read()))
    assert procs[1].sm_util is None
    assert procs[2].sm_util == 70.0


def test_sm_util_newest_sample_per_pid_wins():
    gpu = FakeGpu().add_process(1, 10 * MiB)
    gpu.add_util_sample(1, 300, 90).add_util_sample(1, 100, 10).add_util_sample(1, 200, 50)
    source, _ = opened(gpu)
    assert only(source.read()).processes[0].sm_util == 90.0


def test_sm_util_not_supported_noted_and_not_asked_again():
    gpu = FakeGpu().add_process(1, 10 * MiB).add_util_sample(1, 100, 10)
    gpu.not_supported("nvmlDeviceGetProcessUtilization")
    source, fake = opened(gpu)
    for _ in range(3):
        sample = only(source.read())
    assert sample.processes[0].sm_util is None
    assert sample.processes[0].gpu_memory == 10 * MiB
    assert sample.notes["sm_util"] == NA
    assert sample.state is DeviceState.OK
    assert fake.calls["nvmlDeviceGetProcessUtilization"] == 1


def test_sm_util_no_permission_noted():
    gpu = FakeGpu().add_process(1, 10 * MiB).no_permission("nvmlDeviceGetProcessUtilization")
    source, _ = opened(gpu)
    sample = only(source.read())
    assert sample.processes[0].sm_util is None
    assert sample.notes["sm_util"] == NO_PERM
    assert sample.state is DeviceState.OK


def test_sm_util_other_error_degrades_only_sm_util():
    gpu = FakeGpu(used=2 * GiB).add_process(1, 10 * MiB)
    gpu.fail_with("nvmlDeviceGetProcessUtilization", pynvml.NVML_ERROR_UNKNOWN)
    source, _ = opened(gpu)
    sample = only(source.read())
    assert sample.state is DeviceState.OK and sample.memory_used == 2 * GiB
    assert sample.processes[0].sm_util is None
    assert "Unknown Error" in sample.notes["sm_util"]


def test_sm_util_empty_buffer_nvmlerror_success_is_no_new_samples():
    class EmptyBuffer(FakeNvml):
        """pynvml raises NVMLError(NVML_SUCCESS) when the first call finds nothing."""

        def nvmlDeviceGetProcessUtilization(self, handle, timeStamp):
            super()._call("nvmlDeviceGetProcessUtilization", handle)
            raise pynvml.NVMLError(pynvml.NVML_SUCCESS)

    gpu = FakeGpu().add_process(1, 10 * MiB)
    source = NvmlSource(nvml=EmptyBuffer([gpu]))
    source.open()
    sample = only(source.read())
    assert sample.state is DeviceState.OK and sample.processes[0].sm_util is None
    assert "sm_util" not in sample.notes


# ----------------------------------------------------------------- lost GPU

def test_gpu_lost_mid_run_others_keep_reporting_and_lost_gpu_not_called_again():
    a, b = FakeGpu(name="A", used=1 * GiB), FakeGpu(name="B", used=2 * GiB)
    b.add_process(5, 10 * MiB)
    source, _ = opened(a, b)
    assert [s.state for s in source.read()] == [DeviceState.OK, DeviceState.OK]
    b.lose()
    for _ in range(5):
        first, second = source.read()
        assert first.state is DeviceState.OK and first.memory_used == 1 * GiB
        assert second.state is DeviceState.LOST
        assert second.message == "GPU lost (fell off the bus)"
        assert (second.memory_used, second.memory_free, second.memory_total) == (None, None, None)
        assert second.processes == ()
        assert (second.name, second.index) == ("B", 1)
    assert b.calls_after_lost == 1  # the one call that found out, then never again


def test_gpu_lost_after_k_calls_in_the_middle_of_a_read():
    a, b = FakeGpu(), FakeGpu()
    a.add_process(1, 1 * MiB)
    source, _ = opened(a, b)
    a.lose_after(3)  # memory, utilisation, temperature succeed; power fails
    first, second = source.read()
    assert first.state is DeviceState.LOST
    assert second.state is DeviceState.OK
    calls = a.calls
    source.read()
    assert a.calls == calls


def test_gpu_lost_at_open_is_reported_lost():
    a, b = FakeGpu(), FakeGpu(name="B")
    b.lose()
    source, _ = opened(a, b)
    first, second = source.read()
    assert first.state is DeviceState.OK
    assert second.state is DeviceState.LOST and second.index == 1


# ------------------------------------------------------------ driver vanishes

@pytest.mark.parametrize(
    "code",
    [pynvml.NVML_ERROR_DRIVER_NOT_LOADED, pynvml.NVML_ERROR_UNINITIALIZED,
     pynvml.NVML_ERROR_LIBRARY_NOT_FOUND],
)
def test_driver_vanishing_raises_source_unavailable(code):
    source, fake = opened(FakeGpu(), FakeGpu())
    source.read()
    fake.vanish(code)
    with pytest.raises(SourceUnavailable) as info:
        source.read()
    assert info.value.code == "driver_lost"
    assert info.value.reason.startswith("NVIDIA driver stopped responding: ")
    calls = sum(fake.calls.values())
    with pytest.raises(SourceUnavailable) as again:
        source.read()
    assert again.value.code == "driver_lost"
    assert sum(fake.calls.values()) == calls  # no more NVML calls on a dead driver
    source.close()  # must not raise though nvmlShutdown fails


def test_driver_vanishing_in_the_middle_of_a_read():
    a, b = FakeGpu(), FakeGpu()
    source, fake = opened(a, b)
    fake.vanish_after(6)
    with pytest.raises(SourceUnavailable) as info:
        source.read()
    assert info.value.code == "driver_lost"


def test_reopen_after_driver_came_back():
    source, fake = opened(FakeGpu(used=1 * GiB))
    fake.vanish()
    with pytest.raises(SourceUnavailable):
        source.read()
    source.close()
    fake.vanished = None
    source.open()
    assert only(source.read()).memory_used == 1 * GiB


# ---------------------------------------------------------------------- MIG

def mig_gpu() -> FakeGpu:
    m0 = FakeGpu(name="NVIDIA A100 MIG 3g.20gb", total=20 * GiB, used=4 * GiB, reserved=0)
    m2 = FakeGpu(name="NVIDIA A100 MIG 1g.5gb", total=5 * GiB, used=1 * GiB, reserved=0)
    m0.add_process(100, 3 * GiB).add_util_sample(100, 10, 50)
    m2.add_process(200, None)  # per-process memory n/a without privileges
    parent = FakeGpu(name="NVIDIA A100", total=40 * GiB, used=5 * GiB,
                     mig_enabled=True, mig_slots=[m0, None, m2])
    parent.not_supported("nvmlDeviceGetUtilizationRates")
    return parent


def test_mig_devices_reported_separately():
    parent = mig_gpu()
    source, fake = opened(parent, FakeGpu(name="other"))
    samples = source.read()
    assert [(s.index, s.mig_index, s.display_id) for s in samples] == [
        (0, None, "0"), (0, 0, "0/mig0"), (0, 2, "0/mig2"), (1, None, "1")]
    gpu, m0, m2, other = samples
    assert gpu.memory_total == 40 * GiB and gpu.temperature == 55.0
    assert gpu.processes == ()  # shown once, on the MIG devices
    assert "MIG" in gpu.notes["processes"]
    assert gpu.notes["utilization_gpu"] == NA
    assert (m0.name, m0.memory_total, m0.memory_used) == ("NVIDIA A100 MIG 3g.20gb", 20 * GiB, 4 * GiB)
    assert m0.uuid.startswith("MIG-")
    assert by_pid(m0)[100].gpu_memory == 3 * GiB
    assert by_pid(m0)[100].sm_util is None  # not supported on MIG
    assert "MIG" in m0.notes["sm_util"]
    assert m0.temperature is None and m0.power_draw is None
    assert by_pid(m2)[200].gpu_memory is None
    assert "process_memory" in m2.notes
    assert all(s.state is DeviceState.OK for s in samples)
    assert other.name == "other" and other.mig_index is None
    assert fake.calls["nvmlDeviceGetProcessUtilization"] == 0


def test_mig_handles_fetched_once():
    source, fake = opened(mig_gpu())
    for _ in range(5):
        assert len(source.read()) == 3
    assert fake.calls["nvmlDeviceGetMigDeviceHandleByIndex"] == 3
    assert fake.calls["nvmlDeviceGetMaxMigDeviceCount"] == 1


def test_mig_capable_but_disabled_is_one_gpu():
    gpu = FakeGpu(mig_capable=True, mig_enabled=False).add_process(1, 1 * MiB)
    source, fake = opened(gpu)
    sample = only(source.read())
    assert sample.mig_index is None and len(sample.processes) == 1
    assert fake.calls["nvmlDeviceGetMaxMigDeviceCount"] == 0


def test_mig_parent_lost_marks_its_mig_devices_lost():
    parent = mig_gpu()
    source, _ = opened(parent, FakeGpu())
    parent.lose()
    samples = source.read()
    assert [s.state for s in samples] == [DeviceState.LOST] * 3 + [DeviceState.OK]
    assert parent.calls_after_lost == 1
    assert sum(c.calls_after_lost for c in parent.mig_slots if c) == 0


def test_mig_enumeration_failure_keeps_the_gpu():
    parent = mig_gpu().fail_with("nvmlDeviceGetMaxMigDeviceCount", pynvml.NVML_ERROR_UNKNOWN)
    parent.add_process(9, 1 * MiB)
    source, _ = opened(parent)
    sample = only(source.read())
    assert sample.state is DeviceState.OK
    assert "mig" in sample.notes
    assert by_pid(sample)[9].gpu_memory == 1 * MiB


# ------------------------------------------------------- fake sanity checks

def test_fake_uses_real_error_classes():
    fake = FakeNvml([FakeGpu()])
    with pytest.raises(pynvml.NVMLError_Uninitialized):
        fake.nvmlDeviceGetCount()
    fake.nvmlInit()
    handle = fake.nvmlDeviceGetHandleByIndex(0)
    fake.gpus[0].lose()
    with pytest.raises(pynvml.NVMLError_GpuIsLost):
        fake.nvmlDeviceGetMemoryInfo(handle)
    assert fake.NVMLError is pynvml.NVMLError
    assert fake.NVML_TEMPERATURE_GPU == pynvml.NVML_TEMPERATURE_GPU
    with pytest.raises(AttributeError):
        fake.nvmlDeviceGetBAR1MemoryInfo  # unknown functions are not borrowed from pynvml


def test_sm_util_without_new_samples_becomes_idle_zero_only_after_the_window(monkeypatch):
    import app.core.monitor.nvml_processes as nvml_processes

    now = [1000.0]
    monkeypatch.setattr(nvml_processes.time, "monotonic", lambda: now[0])
    gpu = FakeGpu().add_process(1, 10 * MiB).add_util_sample(1, 100, 55).add_process(2, 10 * MiB)
    source, _ = opened(gpu)
    first = {p.pid: p.sm_util for p in only(source.read()).processes}
    assert first == {1: 55.0, 2: None}  # pid 2: not watched long enough to know

    now[0] += nvml_processes.SM_IDLE_AFTER_S / 2
    assert {p.pid: p.sm_util for p in only(source.read()).processes} == {1: 55.0, 2: None}

    # No sample for longer than the window: the driver saw no kernels from either.
    now[0] += nvml_processes.SM_IDLE_AFTER_S
    assert {p.pid: p.sm_util for p in only(source.read()).processes} == {1: 0.0, 2: 0.0}

    gpu.add_util_sample(2, 200, 30)
    assert {p.pid: p.sm_util for p in only(source.read()).processes} == {1: 0.0, 2: 30.0}
