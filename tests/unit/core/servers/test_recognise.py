"""Recognition of model servers from process lists shaped as Linux and
Windows show them (command lines as the servers' own launchers write them)."""

from __future__ import annotations

from app.core.servers.host import HostProc
from app.core.servers.recognise import recognise


def proc(pid: int, cmdline: list[str], ppid: int | None = 1, name: str | None = None,
         cwd: str | None = None, ports: tuple[int, ...] = (), env: dict | None = None,
         user: str = "ada", exe: str | None = None) -> HostProc:
    name = name or cmdline[0].replace("\\", "/").rsplit("/", 1)[-1]
    return HostProc(pid, ppid, name, tuple(cmdline), exe, cwd, user, ports, env or {},
                    env_read=env is not None)


def test_ollama_with_its_runner_child_is_one_server_on_its_default_port() -> None:
    found = recognise([
        proc(900, ["/usr/local/bin/ollama", "serve"], user="ollama"),
        proc(950, ["/usr/local/bin/ollama", "runner", "--ollama-engine", "--model",
                   "/usr/share/ollama/.ollama/models/blobs/sha256-6a0746a1ec1a", "--port",
                   "41231"], ppid=900, user="ollama"),
        proc(951, ["bash"], ppid=1),
    ])
    assert len(found) == 1
    ollama = found[0]
    assert (ollama.kind, ollama.pid, ollama.pids, ollama.user) == ("ollama", 900, (900, 950),
                                                                   "ollama")
    assert ollama.endpoint == "http://127.0.0.1:11434"


def test_ollama_upstream_llama_server_child_is_not_a_server_of_its_own() -> None:
    found = recognise([
        proc(900, ["ollama", "serve"], env={"OLLAMA_HOST": "0.0.0.0:11500"}),
        proc(960, ["/usr/lib/ollama/llama-server", "--model", "/m/blob", "--port", "39999",
                   "--host", "127.0.0.1", "--no-webui", "--offline"], ppid=900),
    ])
    assert [(f.kind, f.pids) for f in found] == [("ollama", (900, 960))]
    assert found[0].endpoint == "http://127.0.0.1:11500"  # a wildcard bind, asked on loopback


def test_a_standalone_llama_server_is_llama_cpp() -> None:
    found = recognise([proc(70, ["./llama-server", "-m", "q.gguf", "--port", "8081"])])
    assert [(f.kind, f.endpoint) for f in found] == [("llamacpp", "http://127.0.0.1:8081")]


def test_windows_ollama_exe_under_the_tray_app() -> None:
    found = recognise([
        proc(4100, [r"C:\Users\ada\AppData\Local\Programs\Ollama\ollama app.exe"],
             name="ollama app.exe"),
        proc(4200, [r"C:\Users\ada\AppData\Local\Programs\Ollama\ollama.exe", "serve"],
             ppid=4100, name="ollama.exe"),
        proc(4300, [r"C:\Users\ada\AppData\Local\Programs\Ollama\lib\ollama\llama-server.exe",
                    "--model", r"C:\Users\ada\.ollama\models\blobs\sha256-1", "--port", "5120"],
             ppid=4200, name="llama-server.exe"),
    ])
    assert [(f.kind, f.pid, f.pids) for f in found] == [("ollama", 4200, (4200, 4300))]


def test_comfyui_linux_and_windows_portable() -> None:
    found = recognise([
        proc(10, ["/home/ada/ComfyUI/venv/bin/python", "main.py", "--listen", "--port", "8189"],
             cwd="/home/ada/ComfyUI"),
        proc(20, [r"C:\ComfyUI_windows_portable\python_embeded\python.exe", "-s",
                  r"ComfyUI\main.py", "--windows-standalone-build"],
             cwd=r"C:\ComfyUI_windows_portable", name="python.exe"),
    ])
    assert [(f.kind, f.pid, f.endpoint) for f in found] == [
        ("comfyui", 10, "http://127.0.0.1:8189"), ("comfyui", 20, "http://127.0.0.1:8188")]


def test_a_main_py_that_is_not_comfyui_is_nothing() -> None:
    assert recognise([proc(10, ["python", "main.py"], cwd="/home/ada/my-trainer"),
                      proc(11, ["python", "main.py"], cwd="/home/ada/comfy-workflow-tools",
                           ports=(5000,)),
                      proc(12, ["python", "/srv/comfy/tools/main.py"])]) == []


def test_comfyui_listening_everywhere_is_asked_on_loopback() -> None:
    (found,) = recognise([proc(10, ["python", "ComfyUI/main.py", "--listen", "0.0.0.0,::"],
                               cwd="/opt")])
    assert found.endpoint == "http://127.0.0.1:8188"


def test_a_server_started_under_another_is_its_own() -> None:
    found = recognise([
        proc(10, ["python", "main.py"], cwd="/opt/ComfyUI"),
        proc(20, ["ollama", "serve"], ppid=10),
        proc(21, ["ollama", "runner", "--model", "/m/sha256-1"], ppid=20),
        proc(30, ["python", "server.py", "--api"], cwd="/opt/text-generation-webui"),
        proc(31, ["llama-server", "--model", "q.gguf", "--port", "5010"], ppid=30),
    ])
    assert [(f.kind, f.pids) for f in found] == [("comfyui", (10,)), ("ollama", (20, 21)),
                                                 ("tgw", (30, 31))]
    assert found[1].runners == ((21, "/m/sha256-1"),)


def test_a1111_needs_api_and_forge_is_told_apart() -> None:
    found = recognise([
        proc(30, ["python3", "launch.py", "--api", "--port", "7870"],
             cwd="/home/ada/stable-diffusion-webui"),
        proc(31, ["python3", "launch.py"], cwd="/home/ada/stable-diffusion-webui-forge"),
        proc(33, ["python3", "launch.py"], cwd="/home/bo/stable-diffusion-webui", env={}),
        proc(34, ["python3", "launch.py"], cwd="/home/cy/stable-diffusion-webui",
             env={"COMMANDLINE_ARGS": "--xformers --api --port 7870"}),
        proc(32, [r"D:\sd\stable-diffusion-webui\venv\Scripts\python.exe", "launch.py",
                  "--nowebui"], cwd=r"D:\sd\stable-diffusion-webui", name="python.exe"),
    ])
    by_pid = {f.pid: f for f in found}
    assert by_pid[30].kind == "a1111" and by_pid[30].endpoint == "http://127.0.0.1:7870"
    assert by_pid[31].kind == "forge" and by_pid[31].endpoint == "http://127.0.0.1:7860"
    assert by_pid[31].api_off is None  # its environment unread: its API may be on
    assert by_pid[32].kind == "a1111" and by_pid[32].endpoint == "http://127.0.0.1:7861"
    assert by_pid[33].endpoint is None  # read: no --api anywhere
    assert by_pid[33].api_off == "started without --api: its API is off"
    assert by_pid[34].endpoint == "http://127.0.0.1:7870"  # webui-user.sh's COMMANDLINE_ARGS


def test_text_generation_webui_api_port() -> None:
    found = recognise([proc(40, ["python", "server.py", "--api", "--api-port", "5005"],
                            cwd="/opt/text-generation-webui")])
    assert [(f.kind, f.endpoint) for f in found] == [("tgw", "http://127.0.0.1:5005")]


def test_lm_studio_main_process_not_its_electron_helpers_and_port_from_sockets() -> None:
    found = recognise([
        proc(50, ["/opt/LM Studio/lm-studio"], ports=(1234, 41343)),
        proc(51, ["/opt/LM Studio/lm-studio", "--type=renderer"], ppid=50),
        proc(60, ["/home/ada/.lmstudio/bin/llmster"], ports=(1240,)),
    ])
    assert [(f.kind, f.pid, f.endpoint) for f in found] == [
        ("lmstudio", 50, "http://127.0.0.1:1234"), ("lmstudio", 60, "http://127.0.0.1:1240")]
    assert found[0].pids == (50, 51)


def test_vllm_and_sglang_reservations_and_workers() -> None:
    found = recognise([
        proc(70, ["/venv/bin/python", "/venv/bin/vllm", "serve", "Qwen/Qwen2.5-7B",
                  "--gpu-memory-utilization", "0.85", "--enable-sleep-mode"],
             env={"VLLM_SERVER_DEV_MODE": "1"}),
        proc(71, ["/venv/bin/python", "-c", "from multiprocessing.spawn import spawn_main"],
             ppid=70),
        proc(80, ["python", "-m", "sglang.launch_server", "--model-path", "m", "--port", "30001",
                  "--mem-fraction-static", "0.8"]),
    ])
    vllm, sglang = found
    assert vllm.kind == "vllm" and vllm.pids == (70, 71)
    assert vllm.option("gpu_memory_utilization") == "0.85"
    assert vllm.option("sleep_mode") == "" and vllm.option("dev_mode") == "1"
    assert sglang.kind == "sglang" and sglang.endpoint == "http://127.0.0.1:30001"
    assert sglang.option("mem_fraction_static") == "0.8"


def test_vllm_binary_and_tgi_launcher() -> None:
    found = recognise([
        proc(90, ["vllm", "serve", "m", "--port", "8001"]),
        proc(91, ["text-generation-launcher", "--model-id", "m", "--port", "8080"]),
        proc(92, ["text-generation-router", "--port", "8080"], ppid=91),
    ])
    assert [(f.kind, f.port, f.pids) for f in found] == [("vllm", 8001, (90,)),
                                                        ("tgi", 8080, (91, 92))]


def test_nothing_else_is_a_server() -> None:
    assert recognise([
        proc(1, ["/sbin/init"], ppid=0),
        proc(2, ["python", "train.py", "--port", "8188"]),
        proc(3, ["python", "-m", "torch.distributed.run", "train.py"]),
        proc(4, ["ollama", "list"]),
    ]) == []
