"""Container detection from /proc/<pid>/cgroup, and container names from local files."""

from __future__ import annotations

import json
import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.core.monitor import containers
from app.core.monitor.containers import ContainerNames, parse_cgroup, read_container
from app.core.monitor.samples import Container

ID = "3f4e2a1b9c0d8e7f6a5b4c3d2e1f0a9b8c7d6e5f4a3b2c1d0e9f8a7b6c5d4e3f"
ID2 = "9a8b7c6d5e4f30211f2e3d4c5b6a79880f1e2d3c4b5a69788796a5b4c3d2e1f0"
UID = "0f3c2a5e-8b1d-4c7a-9e6f-2d4b8a1c3e5f"
UID_ = UID.replace("-", "_")
STATIC_UID = "6c1a9e8b2f3d4e5a7b8c9d0e1f2a3b4c"  # kubelet static pod: md5 of the manifest

V1_CONTROLLERS = [
    "12:rdma:", "11:hugetlb:", "10:freezer:", "9:cpuset:", "8:perf_event:", "7:net_cls,net_prio:",
    "6:devices:", "5:blkio:", "4:pids:", "3:memory:", "2:cpu,cpuacct:", "1:name=systemd:",
]


def v1(path: str, bare: tuple[str, ...] = ()) -> str:
    """A cgroup v1 file (hybrid: with the trailing v2 line); controllers in ``bare`` sit at "/"."""
    lines = [c + ("/" if c.split(":")[1] in bare else path) for c in V1_CONTROLLERS]
    return "\n".join(lines + ["0::/"]) + "\n"


def v2(path: str) -> str:
    return f"0::{path}\n"


KUBEPODS_BURSTABLE = f"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID_}.slice"

RECOGNISED = {
    # docker
    "docker cgroupfs v1": (v1(f"/docker/{ID}"), Container("docker", ID)),
    "docker cgroupfs v1, some controllers at /": (
        v1(f"/docker/{ID}", bare=("rdma", "hugetlb", "cpuset", "net_cls,net_prio")), Container("docker", ID)),
    "docker cgroupfs v2": (v2(f"/docker/{ID}"), Container("docker", ID)),
    "docker systemd v2": (v2(f"/system.slice/docker-{ID}.scope"), Container("docker", ID)),
    "docker systemd v1": (v1(f"/system.slice/docker-{ID}.scope", bare=("rdma",)), Container("docker", ID)),
    "docker rootless": (
        v2(f"/user.slice/user-1000.slice/user@1000.service/user.slice/docker-{ID}.scope"), Container("docker", ID)),
    "docker in docker: inner wins": (v1(f"/docker/{ID}/docker/{ID2}"), Container("docker", ID2)),
    "docker running systemd inside": (v2(f"/docker/{ID}/system.slice/ssh.service"), Container("docker", ID)),
    # podman
    "podman rootful": (v2(f"/machine.slice/libpod-{ID}.scope"), Container("podman", ID)),
    "podman rootful /container": (v2(f"/machine.slice/libpod-{ID}.scope/container"), Container("podman", ID)),
    "podman rootful v1": (v1(f"/machine.slice/libpod-{ID}.scope", bare=("rdma",)), Container("podman", ID)),
    "podman rootless": (
        v2(f"/user.slice/user-1000.slice/user@1000.service/user.slice/libpod-{ID}.scope"), Container("podman", ID)),
    "podman pod (not k8s)": (
        v2(f"/machine.slice/machine-libpod_pod_{ID2}.slice/libpod-{ID}.scope"), Container("podman", ID)),
    "podman cgroupfs": (v1(f"/libpod_parent/libpod-{ID}"), Container("podman", ID)),
    "podman conmon inside docker: the docker container": (
        v2(f"/docker/{ID2}/machine.slice/libpod-conmon-{ID}.scope"), Container("docker", ID2)),
    # kubernetes
    "k8s containerd systemd burstable": (
        v2(f"{KUBEPODS_BURSTABLE}/cri-containerd-{ID}.scope"), Container("containerd", ID, pod=UID)),
    "k8s containerd systemd burstable v1": (
        v1(f"{KUBEPODS_BURSTABLE}/cri-containerd-{ID}.scope", bare=("rdma",)), Container("containerd", ID, pod=UID)),
    "k8s containerd systemd besteffort": (
        v2(f"/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{UID_}.slice/cri-containerd-{ID}.scope"),
        Container("containerd", ID, pod=UID)),
    "k8s containerd systemd guaranteed": (
        v2(f"/kubepods.slice/kubepods-pod{UID_}.slice/cri-containerd-{ID}.scope"),
        Container("containerd", ID, pod=UID)),
    "k8s static pod": (
        v2(f"/kubepods.slice/kubepods-pod{STATIC_UID}.slice/cri-containerd-{ID}.scope"),
        Container("containerd", ID, pod=STATIC_UID)),
    "k8s cgroupfs burstable (runtime assumed containerd)": (
        v1(f"/kubepods/burstable/pod{UID}/{ID}"), Container("containerd", ID, pod=UID)),
    "k8s cgroupfs guaranteed": (v2(f"/kubepods/pod{UID}/{ID}"), Container("containerd", ID, pod=UID)),
    "k8s cri-o systemd": (v2(f"{KUBEPODS_BURSTABLE}/crio-{ID}.scope"), Container("cri-o", ID, pod=UID)),
    "k8s cri-o systemd /container": (
        v2(f"{KUBEPODS_BURSTABLE}/crio-{ID}.scope/container"), Container("cri-o", ID, pod=UID)),
    "k8s cri-o cgroupfs": (v1(f"/kubepods/besteffort/pod{UID}/crio-{ID}"), Container("cri-o", ID, pod=UID)),
    "k8s cri-dockerd": (v2(f"{KUBEPODS_BURSTABLE}/docker-{ID}.scope"), Container("docker", ID, pod=UID)),
    "kind: pod inside a docker node": (
        v2(f"/docker/{ID2}/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-besteffort.slice/"
           f"kubelet-kubepods-besteffort-pod{UID_}.slice/cri-containerd-{ID}.scope"),
        Container("containerd", ID, pod=UID)),
    # nerdctl --cgroup-manager=systemd ("system.slice:nerdctl:<id>")
    "nerdctl systemd": (v2(f"/system.slice/nerdctl-{ID}.scope"), Container("containerd", ID)),
    # lxc / lxd
    "lxc 4 payload": (v2("/lxc.payload.web1/system.slice/ssh.service"), Container("lxc", "web1", name="web1")),
    "lxd project container": (
        v2("/lxc.payload.ml_trainer/init.scope"), Container("lxc", "ml_trainer", name="ml_trainer")),
    "lxc 3 payload dir": (v1("/lxc.payload/web1"), Container("lxc", "web1", name="web1")),
    "old lxc v1": (v1("/lxc/web1/user.slice", bare=("rdma",)), Container("lxc", "web1", name="web1")),
    "docker inside lxc: docker wins": (
        v2(f"/lxc.payload.web1/system.slice/docker-{ID}.scope"), Container("docker", ID)),
}


@pytest.mark.parametrize("text, expected", RECOGNISED.values(), ids=RECOGNISED.keys())
def test_recognised(text, expected):
    assert parse_cgroup(text) == expected


NOT_CONTAINERS = {
    "user session": v2("/user.slice/user-1000.slice/session-3.scope"),
    "user session v1": v1("/user.slice/user-1000.slice/session-3.scope", bare=("rdma", "cpuset")),
    "system service": v2("/system.slice/ssh.service"),
    "root (inside the container's own cgroup namespace)": v2("/"),
    "all v1 controllers at root": v1("/"),
    "init": v2("/init.scope"),
    "empty": "",
    "blank lines": "\n\n",
    "garbage": "not a cgroup file at all\x00\xff::::",
    "tmux scope": v2("/user.slice/user-1000.slice/user@1000.service/app.slice/"
                     "app-tmux-spawn-9f1c2d3e-4b5a-6c7d-8e9f-0a1b2c3d4e5f.scope"),
    "vscode scope": v2("/user.slice/user-1000.slice/user@1000.service/app.slice/app-code-4c2d1b3a.scope"),
    "docker daemon": v2("/system.slice/docker.service"),
    "containerd daemon": v2("/system.slice/containerd.service"),
    "podman conmon": v2(f"/machine.slice/libpod-conmon-{ID}.scope"),
    "podman rootless conmon": v2(f"/user.slice/user-1000.slice/user@1000.service/user.slice/libpod-conmon-{ID}.scope"),
    "cri-o conmon": v2(f"{KUBEPODS_BURSTABLE}/crio-conmon-{ID}.scope"),
    "lxc monitor": v2("/lxc.monitor.web1"),
    "pod cgroup itself": v2(KUBEPODS_BURSTABLE),
    "containerd namespace (ambiguous)": v2(f"/default/{ID}"),
    "bare id at the root": v2(f"/{ID}"),
    "id under a non-pod kubepods dir": v2(f"/kubepods/burstable/{ID}"),
    "pod-like dir outside kubepods": v2(f"/batch/pod{UID}/{ID}"),
    "short docker id": v2("/docker/3f4e2a1b9c0d"),
    "an unrelated 32-hex cgroup": v1("/process_api/dc2faf5a9817697557c02e360ca39b97", bare=("rdma",)),
    "no path field": "12:rdma\n",
}


@pytest.mark.parametrize("text", NOT_CONTAINERS.values(), ids=NOT_CONTAINERS.keys())
def test_not_a_container(text):
    assert parse_cgroup(text) is None


def test_non_string_input_is_none():
    assert parse_cgroup(None) is None  # type: ignore[arg-type]
    assert parse_cgroup(b"0::/docker/" + ID.encode()) is None  # type: ignore[arg-type]


def test_label_of_a_parsed_k8s_container():
    assert parse_cgroup(v2(f"{KUBEPODS_BURSTABLE}/cri-containerd-{ID}.scope")).label == "containerd (k8s) 3f4e2a1b9c0d"


@settings(max_examples=300)
@given(st.text())
def test_arbitrary_text_never_raises(text):
    result = parse_cgroup(text)
    assert result is None or isinstance(result, Container)


SEGMENTS = st.sampled_from([
    "docker", ID, ID2, f"docker-{ID}.scope", f"libpod-conmon-{ID}.scope", f"crio-{ID}", "kubepods",
    f"kubepods-burstable-pod{UID_}.slice", f"pod{UID}", "lxc", "lxc.payload", "lxc.payload.web1", "..", "",
    "system.slice", "user@1000.service", "pod", "lxc.payload.", "-pod", f"pod{STATIC_UID}",
]) | st.text(max_size=12)


@settings(max_examples=300)
@given(st.lists(st.tuples(st.text(max_size=3), st.text(max_size=6), st.lists(SEGMENTS, max_size=8)), max_size=5))
def test_cgroup_shaped_text_never_raises(lines):
    text = "\n".join(f"{n}:{ctl}:/" + "/".join(segs) for n, ctl, segs in lines)
    result = parse_cgroup(text)
    if result is not None and result.runtime != "lxc":
        assert containers._HEX64.fullmatch(result.id)


# -- read_container -----------------------------------------------------------


def test_read_container_on_this_process_does_not_raise():
    found = read_container(os.getpid())
    assert found is None or isinstance(found, Container), f"this process: {found!r}"
    with open(f"/proc/{os.getpid()}/cgroup") as f:
        text = f.read()
    assert found == parse_cgroup(text), f"read_container found {found!r} in {text!r}"


def fake_proc(tmp_path, pid, text):
    (tmp_path / "proc" / str(pid)).mkdir(parents=True)
    (tmp_path / "proc" / str(pid) / "cgroup").write_text(text)
    return str(tmp_path / "proc")


def test_read_container_from_a_fake_proc(tmp_path):
    proc = fake_proc(tmp_path, 4242, v1(f"/docker/{ID}", bare=("rdma",)))
    assert read_container(4242, proc) == Container("docker", ID)


def test_read_container_fills_the_name(tmp_path):
    proc = fake_proc(tmp_path, 4242, v2(f"/system.slice/docker-{ID}.scope"))
    write_docker_config(tmp_path / "docker", ID, "/trainer")
    names = ContainerNames(docker_root=str(tmp_path / "docker"), podman_roots=())
    assert read_container(4242, proc, names) == Container("docker", ID, name="trainer")


def test_read_container_keeps_the_lxc_name_from_the_path(tmp_path):
    proc = fake_proc(tmp_path, 7, v2("/lxc.payload.web1/init.scope"))
    names = ContainerNames(docker_root=str(tmp_path), podman_roots=())
    assert read_container(7, proc, names) == Container("lxc", "web1", name="web1")


def test_read_container_not_in_a_container(tmp_path):
    proc = fake_proc(tmp_path, 7, v2("/user.slice/user-1000.slice/session-3.scope"))
    assert read_container(7, proc, ContainerNames(docker_root=str(tmp_path), podman_roots=())) is None


def test_read_container_survives_undecodable_bytes(tmp_path):
    (tmp_path / "9").mkdir()
    (tmp_path / "9" / "cgroup").write_bytes(b"\xff\xfe:\x80:/junk\n0::/docker/" + ID.encode() + b"\n")
    assert read_container(9, str(tmp_path)) == Container("docker", ID)


@pytest.mark.parametrize("pid", [999999999, -1, 0])
def test_read_container_vanished_pid(tmp_path, pid):
    assert read_container(pid, str(tmp_path)) is None


def test_read_container_odd_proc_roots(tmp_path):
    (tmp_path / "file").write_text("x")
    assert read_container(1, str(tmp_path / "file")) is None
    (tmp_path / "5" / "cgroup").mkdir(parents=True)  # a directory where the file should be
    assert read_container(5, str(tmp_path)) is None
    assert read_container(1, str(tmp_path / "nope")) is None


# -- ContainerNames ---------------------------------------------------------


def write_docker_config(root, cid, name):
    """A trimmed but real-shaped /var/lib/docker/containers/<id>/config.v2.json."""
    (root / cid).mkdir(parents=True, exist_ok=True)
    config = {
        "StreamConfig": {},
        "State": {"Running": True, "Paused": False, "Pid": 4242, "ExitCode": 0,
                  "StartedAt": "2024-05-29T10:11:12.123456789Z", "Health": None},
        "ID": cid,
        "Created": "2024-05-29T10:11:11.987654321Z",
        "Path": "python",
        "Args": ["train.py", "--bs", "256"],
        "Config": {"Hostname": cid[:12], "Env": ["NVIDIA_VISIBLE_DEVICES=all"], "Image": "pytorch/pytorch:latest"},
        "Image": "sha256:" + ID2,
        "Name": name,
        "Driver": "overlay2",
        "RestartCount": 0,
    }
    path = root / cid / "config.v2.json"
    path.write_text(json.dumps(config))
    return path


def podman_entry(cid, name):
    """One element of containers/storage's containers.json, as podman writes it."""
    return {
        "id": cid,
        "names": [name],
        "image": ID2,
        "layer": "b1c2d3e4f5a60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f90",
        "metadata": json.dumps({"image-name": "docker.io/pytorch/pytorch:latest", "image-id": ID2,
                                "name": name, "created-at": 1716977471, "mountlabel": ""}),
        "big-data-names": ["volatile.json", "config.json"],
        "big-data-sizes": {"config.json": 9871, "volatile.json": 1203},
        "created": "2024-05-29T10:11:11.987654321Z",
        "flags": {"MountLabel": "", "ProcessLabel": ""},
    }


def write_podman_store(root, entries, mtime_ns=None):
    root.mkdir(parents=True, exist_ok=True)
    path = root / "containers.json"
    path.write_text(json.dumps(entries))
    if mtime_ns is not None:
        os.utime(path, ns=(mtime_ns, mtime_ns))
    return path


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


@pytest.fixture
def reads(monkeypatch):
    """Paths the module opened for names, in order."""
    seen = []
    real = containers._read_json

    def spy(path):
        seen.append(path)
        return real(path)

    monkeypatch.setattr(containers, "_read_json", spy)
    return seen


def test_docker_name_read_once_and_cached(tmp_path, reads):
    write_docker_config(tmp_path, ID, "/trainer")
    names = ContainerNames(docker_root=str(tmp_path), podman_roots=())
    assert names.name(Container("docker", ID)) == "trainer"
    assert names.name(Container("docker", ID, pod=UID)) == "trainer"
    assert len(reads) == 1


def test_docker_miss_is_cached_too(tmp_path, reads):
    names = ContainerNames(docker_root=str(tmp_path), podman_roots=())
    assert names.name(Container("docker", ID)) is None
    write_docker_config(tmp_path, ID, "/late")
    assert names.name(Container("docker", ID)) is None
    assert len(reads) == 1


@pytest.mark.parametrize("content", ["{not json", "", '["a list"]', '{"Name": 7}', '{"Name": "/"}', '{"ID": "x"}'])
def test_docker_bad_config(tmp_path, content):
    path = write_docker_config(tmp_path, ID, "/x")
    path.write_text(content)
    assert ContainerNames(docker_root=str(tmp_path), podman_roots=()).name(Container("docker", ID)) is None


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files whatever their mode")
def test_docker_unreadable_config(tmp_path):
    path = write_docker_config(tmp_path, ID, "/trainer")
    path.chmod(0)
    try:
        assert ContainerNames(docker_root=str(tmp_path), podman_roots=()).name(Container("docker", ID)) is None
    finally:
        path.chmod(0o600)


def test_docker_id_that_is_not_an_id_is_not_a_path(tmp_path, reads):
    names = ContainerNames(docker_root=str(tmp_path), podman_roots=())
    assert names.name(Container("docker", "../../etc")) is None
    assert names.name(Container("docker", "")) is None
    assert reads == []


def test_docker_missing_root(tmp_path):
    names = ContainerNames(docker_root=str(tmp_path / "nope"), podman_roots=())
    assert names.name(Container("docker", ID)) is None


def test_podman_rootless_then_rootful(tmp_path):
    rootless, rootful = tmp_path / "home", tmp_path / "var"
    write_podman_store(rootless, [podman_entry(ID, "trainer")])
    write_podman_store(rootful, [podman_entry(ID2, "server")])
    names = ContainerNames(docker_root=str(tmp_path), podman_roots=(str(rootless), str(rootful)))
    assert names.name(Container("podman", ID)) == "trainer"
    assert names.name(Container("podman", ID2)) == "server"
    assert names.name(Container("podman", "f" * 64)) is None


def test_podman_missing_dir_is_skipped(tmp_path):
    write_podman_store(tmp_path / "var", [podman_entry(ID, "trainer")])
    names = ContainerNames(docker_root=str(tmp_path), podman_roots=(str(tmp_path / "nope"), str(tmp_path / "var")))
    assert names.name(Container("podman", ID)) == "trainer"


@pytest.mark.parametrize("content", ["[{", "{}", "null", '[{"id": 5}, "x", {"id": "a", "names": []}]'])
def test_podman_corrupt_store(tmp_path, content):
    path = write_podman_store(tmp_path, [])
    path.write_text(content)
    names = ContainerNames(docker_root=str(tmp_path), podman_roots=(str(tmp_path),))
    assert names.name(Container("podman", ID)) is None


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files whatever their mode")
def test_podman_unreadable_store(tmp_path):
    path = write_podman_store(tmp_path, [podman_entry(ID, "trainer")])
    path.chmod(0)
    try:
        names = ContainerNames(docker_root=str(tmp_path), podman_roots=(str(tmp_path),))
        assert names.name(Container("podman", ID)) is None
    finally:
        path.chmod(0o600)


def test_podman_store_parsed_once_per_mtime(tmp_path, reads):
    write_podman_store(tmp_path, [podman_entry(ID, "trainer"), podman_entry(ID2, "server")], mtime_ns=10**18)
    clock = Clock()
    names = ContainerNames(docker_root=str(tmp_path), podman_roots=(str(tmp_path),), clock=clock)
    assert names.name(Container("podman", ID)) == "trainer"
    clock.now += 5
    assert names.name(Container("podman", ID2)) == "server"  # same mtime: the parsed map serves it
    assert names.name(Container("podman", "e" * 64)) is None
    assert len(reads) == 1


def test_podman_reread_at_most_once_a_second(tmp_path, reads):
    clock = Clock()
    names = ContainerNames(docker_root=str(tmp_path), podman_roots=(str(tmp_path),), clock=clock)
    write_podman_store(tmp_path, [podman_entry(ID, "trainer")], mtime_ns=10**18)
    assert names.name(Container("podman", ID)) == "trainer"
    # A new container is created: the file changes within the same second.
    write_podman_store(tmp_path, [podman_entry(ID, "trainer"), podman_entry(ID2, "new")], mtime_ns=10**18 + 1)
    clock.now += 0.5
    assert names.name(Container("podman", ID2)) is None  # not re-read yet...
    assert len(reads) == 1
    clock.now += 0.6
    assert names.name(Container("podman", ID2)) == "new"  # ...and that None was not cached
    assert len(reads) == 2


def test_podman_miss_on_a_fresh_map_is_cached(tmp_path, reads):
    clock = Clock()
    write_podman_store(tmp_path, [podman_entry(ID, "trainer")], mtime_ns=10**18)
    names = ContainerNames(docker_root=str(tmp_path), podman_roots=(str(tmp_path),), clock=clock)
    assert names.name(Container("podman", ID2)) is None
    write_podman_store(tmp_path, [podman_entry(ID2, "late")], mtime_ns=10**18 + 1)
    clock.now += 10
    assert names.name(Container("podman", ID2)) is None  # negative results are kept
    assert len(reads) == 1


def test_podman_default_roots_honour_xdg_data_home(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    write_podman_store(tmp_path / "data" / "containers" / "storage" / "overlay-containers",
                       [podman_entry(ID, "trainer")])
    assert ContainerNames(docker_root=str(tmp_path)).name(Container("podman", ID)) == "trainer"


def test_podman_default_roots_fall_back_to_home(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("XDG_DATA_HOME", "relative/ignored")
    write_podman_store(tmp_path / ".local" / "share" / "containers" / "storage" / "overlay-containers",
                       [podman_entry(ID, "trainer")])
    assert ContainerNames(docker_root=str(tmp_path)).name(Container("podman", ID)) == "trainer"


@pytest.mark.parametrize("container", [
    Container("containerd", ID, pod=UID), Container("cri-o", ID, pod=UID), Container("containerd", ID),
    Container("rkt", ID),
])
def test_runtimes_without_a_readable_name_source(tmp_path, reads, container):
    names = ContainerNames(docker_root=str(tmp_path), podman_roots=(str(tmp_path),))
    assert names.name(container) is None
    assert reads == []


def test_a_name_already_known_is_kept(tmp_path, reads):
    names = ContainerNames(docker_root=str(tmp_path), podman_roots=())
    assert names.name(Container("lxc", "web1", name="web1")) == "web1"
    assert names.name(Container("docker", ID, name="given")) == "given"
    assert reads == []
