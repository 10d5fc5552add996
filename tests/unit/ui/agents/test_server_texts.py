"""The texts of model servers: names of their processes, idle clocks, expiry, the
row menu's entries, what "Free all" unloads and the lines of an unload's outcome."""

from __future__ import annotations

import dataclasses

import pytest

from app.core.control.records import ModelAction
from app.core.control.requests import Reload, Unload
from app.core.servers.types import Reservation, ServerModel
from app.core.units import GiB
from app.ui.agents import server_texts as st
from app.ui.agents.model_actions import model_summary
from tests.unit.ui.agents import servers as srv


def test_process_names_say_which_server_and_what_it_holds():
    o = srv.ollama()
    assert st.process_name(o, srv.OLLAMA, 0) == "Ollama 0.12.3 (server)"
    assert st.process_name(o, srv.RUNNER, 0) == "Ollama runner · qwen2.5:7b, llama3.2:3b"
    assert st.process_name(o, srv.RUNNER, 1) == "Ollama runner"  # no model on GPU 1
    # A server holding its models itself names them; "models loaded by ComfyUI" is no name.
    assert st.process_name(srv.llamacpp(), srv.LLAMA, 0) == \
        "llama.cpp b4500 (server) · Meta-Llama-3.1-8B-Instruct-Q4_K_M.gguf"
    assert st.process_name(srv.comfyui(), srv.COMFY, 1) == "ComfyUI 0.3.40 (server)"
    many = dataclasses.replace(o, models=o.models + (ServerModel("m3", "m3", GiB, gpu=0),))
    assert st.model_names(many, 0) == "qwen2.5:7b, llama3.2:3b +1"
    vllm_worker = dataclasses.replace(srv.vllm(), pids=(srv.VLLM, 5401))
    assert st.process_name(vllm_worker, 5401, 1) == "vLLM worker · Qwen/Qwen2.5-7B-Instruct"


def test_activity_expiry_state_and_gpu_cells():
    o = srv.ollama()
    qwen, llama = o.models
    assert st.model_activity(o, qwen, srv.NOW) == "idle 4 min 05 s"
    assert st.model_activity(o, llama, srv.NOW) == "generating"
    unknown = dataclasses.replace(qwen, idle_since=None)
    assert st.model_activity(o, unknown, srv.NOW) == "n/a"
    assert st.expires_in(qwen, srv.NOW) == "in 3 min 00 s"
    assert st.expires_text(qwen, srv.NOW) == "unloads itself in 3 min 00 s"
    assert st.expires_in(qwen, srv.NOW + 500) == "now"
    forever = dataclasses.replace(qwen, expires_at=srv.NOW + 10 * 365 * 86400)
    assert st.expires_in(forever, srv.NOW) == "never"
    assert st.expires_in(srv.comfyui().models[0], srv.NOW) == "n/a"
    assert st.expires_text(srv.comfyui().models[0], srv.NOW) == ""
    assert st.state_text(srv.a1111().models[0]) == "On CPU (host RAM)"
    snap = srv.snapshot()
    assert st.gpu_text(snap, qwen) == "0"
    assert st.gpu_text(snap, dataclasses.replace(qwen, gpu=None)) == "n/a"


def test_server_activity_counts_a_generating_model():
    assert st.server_activity(srv.ollama(), srv.NOW) == "generating"  # its llama3.2 is
    assert st.server_activity(srv.ollama(busy_model=False), srv.NOW) == "activity n/a"
    assert st.server_activity(srv.comfyui(), srv.NOW) == "idle 30 s"


def test_vram_unknown_is_na_and_its_tooltip_says_where_figures_come_from():
    o = srv.ollama()
    assert "4.7 GiB on the GPU, as Ollama reports it (size_vram)" in \
        st.vram_tooltip(o, o.models[0])
    assert "Whole model: 5.1 GiB" in st.vram_tooltip(o, o.models[0])
    llama = srv.llamacpp()
    assert st.vram_tooltip(llama, llama.models[0]).startswith("llama.cpp reports no GPU figure")


def test_server_lines():
    o = srv.ollama()
    assert st.server_facts(o) == ("server at http://127.0.0.1:11434 · user alice · "
                                  "pid 4242, runner 4250")
    assert st.server_facts(dataclasses.replace(o, endpoint=None, user=None)).startswith(
        "server (no API port found) · user n/a")
    assert st.unload_note(o) == f"Unload: {srv.OLLAMA_UNLOAD}"
    assert st.unload_note(srv.llamacpp()) == f"No unload: {srv.LLAMA_NONE}"
    hung = dataclasses.replace(o, models=(), error="no answer in 2 s", can_unload=False,
                               unload_note="", reachable=False)
    assert st.unload_note(hung) == ""  # it did not answer: nothing is known of its unload
    assert st.error_text(hung) == "⚠ Ollama's API: no answer in 2 s"
    assert st.reservation_text(srv.vllm()).endswith("· KV cache 37 % full")
    unknown = dataclasses.replace(srv.vllm(), reservation=Reservation(None, "TGI sizes", None))
    assert st.reservation_text(unknown) == "TGI sizes · KV cache n/a full"
    assert st.nvml_text(srv.snapshot(), o) == "NVML: 7.2 GiB on GPU 0 (the server and its runner)"
    assert st.nvml_text(srv.snapshot(), srv.comfyui()) == "NVML: 6.8 GiB on GPU 1 (the server)"


def test_tooltip_lines_list_models_and_what_unload_does():
    lines = st.server_tooltip(srv.ollama(), srv.RUNNER, srv.NOW)
    assert lines[0] == ("Ollama 0.12.3: model server at http://127.0.0.1:11434 · user alice · "
                        "pid 4242, runner 4250")
    assert "This process is its runner: the memory is the server's" in lines
    assert "  qwen2.5:7b: 4.7 GiB, loaded, idle 4 min 05 s, unloads itself in 3 min 00 s" \
        in lines
    assert f"Unload: {srv.OLLAMA_UNLOAD}" in lines


def test_menu_entries_unload_each_model_or_say_why_not():
    o = srv.ollama()
    (t1, tip1, r1), (t2, tip2, r2) = st.menu_entries(o)
    assert (t1, r1) == ("Unload qwen2.5:7b (Ollama)",
                        Unload(srv.OLLAMA, "qwen2.5:7b", name="qwen2.5:7b", size=o.models[0].vram_bytes))
    assert tip1 == srv.OLLAMA_UNLOAD
    assert (t2, r2) == ("Unload llama3.2:3b (Ollama): generating now", None)
    assert tip2.startswith("Generating now")
    [(text, tip, req)] = st.menu_entries(srv.llamacpp())
    assert (text, tip, req) == ("llama.cpp's server has no unload API", srv.LLAMA_NONE, None)
    [(text, _tip, req)] = st.menu_entries(srv.a1111())
    assert text.startswith("Reload sd_xl_base_1.0") and isinstance(req, Reload)
    hung = dataclasses.replace(o, models=(), error="no answer in 2 s")
    assert st.menu_entries(hung)[0][::2] == ("Ollama: no answer in 2 s", None)
    assert st.menu_entries(dataclasses.replace(o, models=()))[0][::2] == \
        ("Nothing loaded in Ollama", None)


def test_a_remote_servers_requests_name_its_host():
    [(_t, _tip, unload), _busy] = st.menu_entries(srv.ollama(), "gpu1")
    assert isinstance(unload, Unload) and unload.host == "gpu1"
    [(_t, _tip, reload)] = st.menu_entries(srv.a1111(), "gpu1")
    assert isinstance(reload, Reload) and reload.host == "gpu1"


def test_free_all_takes_loaded_models_not_generating_of_servers_with_an_unload():
    found = [(s.label, m.id) for s, m in st.freeable(srv.snapshot())]
    # llama3.2 generates; A1111's checkpoint is on the CPU; llama.cpp and vLLM have no unload.
    assert found == [("Ollama", "qwen2.5:7b"), ("ComfyUI", "all")]
    busy = srv.snapshot(servers=(srv.comfyui(busy=True),))
    assert st.freeable(busy) == []
    assert st.freeable(None) == []


@pytest.mark.parametrize("outcome,note,freed,line,level", [
    ("freed", "Ollama unloaded it: freed 4.4 GiB (NVML)", int(4.4 * GiB), "freed 4.4 GiB", "ok"),
    ("pending", "ComfyUI frees after the prompt it is running", None,
     "still pending — ComfyUI frees after the prompt it is running", "waiting"),
    ("not freed", "NVML shows no drop after 15 s", None,
     "not freed — NVML shows no drop after 15 s", "error"),
    ("refused", "Ollama is generating now", None, "not unloaded — Ollama is generating now",
     "error"),
    ("failed", "Ollama did not answer: timeout", None,
     "failed — Ollama did not answer: timeout", "error"),
])
def test_outcome_lines(outcome, note, freed, line, level):
    o = srv.ollama()
    action = srv.outcome(o, "qwen2.5:7b", outcome, note, freed)
    assert st.served(action)
    assert st.outcome_line(action) == line
    assert st.outcome_level(action) == level
    assert model_summary(action) == f"Ollama 0.12.3 (4242): qwen2.5:7b: {line}"


def test_a_running_server_unload_says_so_and_is_told_apart_from_agent_unloads():
    action = srv.running(srv.ollama(), "qwen2.5:7b")
    assert st.served(action)
    assert st.outcome_line(action) == "unloading…" and st.outcome_level(action) == "waiting"
    assert model_summary(action) == "Ollama 0.12.3 (4242): unloading qwen2.5:7b…"
    agent = ModelAction("unload", 10, "m", "m", "job.py (10)")
    assert not st.served(agent)
    policy = ModelAction("unload", 10, "m", "m", "job.py (10)", reason="pressure", nvml=False)
    assert not st.served(policy)
    server_policy = dataclasses.replace(policy, to="server")
    assert st.served(server_policy)
    assert model_summary(server_policy) == "job.py (10): unloading m…"


def test_a_runner_is_named_by_the_model_it_holds_where_the_server_says_which():
    import dataclasses

    server = srv.ollama()
    held = tuple(dataclasses.replace(m, pid=srv.RUNNER if m.id == "qwen2.5:7b" else 4251)
                 for m in server.models)
    named = dataclasses.replace(server, models=held, pids=(srv.OLLAMA, srv.RUNNER, 4251))
    assert st.process_name(named, srv.RUNNER, 0) == "Ollama runner · qwen2.5:7b"
    assert st.process_name(named, 4251, 0) == "Ollama runner · llama3.2:3b"
