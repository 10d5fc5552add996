"""ServerView: a model server in the detail view, its models' cells and buttons, the
outcome of an unload beside its model, reservations and API errors."""

from __future__ import annotations

import dataclasses

import pytest

from app.core.control.requests import Reload, Unload
from app.ui.agents.server_view import (
    HEADERS,
    MODELS_UNKNOWN,
    SCOL_ACTIVITY,
    SCOL_EXPIRES,
    SCOL_GPU,
    SCOL_NAME,
    SCOL_STATE,
    SCOL_VRAM,
    ServerView,
)
from tests.unit.ui.agents import servers as srv


@pytest.fixture
def view(qtbot):
    v = ServerView()
    qtbot.addWidget(v)
    v.resize(1100, 300)
    v.show()
    return v


def test_hidden_without_a_server(view):
    view.set_server(None, srv.snapshot())
    assert view.isHidden()


def test_ollama_header_and_one_line_per_model(view):
    snap = srv.snapshot()
    view.set_server(srv.ollama(), snap)
    assert view.isVisible()
    assert view.title_label.text() == "Ollama 0.12.3"
    assert view.facts_label.text() == ("server at http://127.0.0.1:11434 · user alice · "
                                       "pid 4242, runner 4250")
    assert view.activity_label.text() == "generating"
    assert view.nvml_label.text() == "NVML: 7.2 GiB on GPU 0 (the server and its runner)"
    assert view.error_label.isHidden() and view.reservation_label.isHidden()
    assert view.row_texts("qwen2.5:7b") == ["qwen2.5:7b", "4.7 GiB", "0", "Loaded",
                                            "idle 4 min 05 s", "in 3 min 00 s"]
    assert view.row_texts("llama3.2:3b") == ["llama3.2:3b", "2.1 GiB", "0", "Loaded",
                                             "generating", "in 4 min 50 s"]
    assert view.headers[SCOL_EXPIRES].text() == HEADERS[SCOL_EXPIRES]
    assert view.headers[SCOL_EXPIRES].isVisible()
    assert view.note_label.text() == f"Unload: {srv.OLLAMA_UNLOAD}"


def test_unload_is_enabled_when_idle_and_sends_the_servers_request(view, qtbot):
    o = srv.ollama()
    view.set_server(o, srv.snapshot())
    button = view.button_of("qwen2.5:7b")
    assert button.text() == "Unload" and button.isEnabled()
    assert button.toolTip() == srv.OLLAMA_UNLOAD
    with qtbot.waitSignal(view.request, timeout=1000) as sent:
        button.click()
    assert sent.args == [Unload(srv.OLLAMA, "qwen2.5:7b", name="qwen2.5:7b",
                                size=o.models[0].vram_bytes)]


def test_a_generating_model_cannot_be_unloaded_and_says_why(view):
    view.set_server(srv.ollama(), srv.snapshot())
    button = view.button_of("llama3.2:3b")
    assert not button.isEnabled()
    assert button.toolTip() == "Generating now: it can be unloaded once it is idle"
    assert view.note_of("llama3.2:3b") == "generating now: it can be unloaded once it is idle"


def test_a_busy_server_disables_every_unload(view):
    view.set_server(srv.comfyui(busy=True), srv.snapshot())
    assert not view.button_of("all").isEnabled()
    assert view.activity_label.text() == "generating"


def test_a_checkpoint_on_the_cpu_offers_reload(view, qtbot):
    view.set_server(srv.a1111(), srv.snapshot())
    model_id = srv.a1111().models[0].id
    button = view.button_of(model_id)
    assert button.text() == "Reload" and button.isEnabled()
    assert view.row_texts(model_id)[SCOL_STATE] == "On CPU (host RAM)"
    with qtbot.waitSignal(view.request, timeout=1000) as sent:
        button.click()
    assert sent.args == [Reload(srv.A1111, model_id, model_id)]


def test_a_server_without_unload_shows_its_note_and_no_button(view):
    view.set_server(srv.llamacpp(), srv.snapshot())
    model_id = srv.llamacpp().models[0].id
    assert view.button_of(model_id).isHidden()
    assert view.note_label.text() == f"No unload: {srv.LLAMA_NONE}"
    texts = view.row_texts(model_id)
    assert texts[SCOL_NAME] == model_id and texts[SCOL_GPU] == "0"
    assert texts[SCOL_VRAM] == "n/a"  # the server reports no VRAM figure
    assert texts[SCOL_ACTIVITY] == "n/a"  # nor whether it is in use
    assert view.headers[SCOL_EXPIRES].isHidden()  # nobody says when it unloads itself
    assert view.activity_label.text() == "activity n/a"


def test_a_reservation_shows_its_text_and_kv_usage(view):
    view.set_server(srv.vllm(), srv.snapshot())
    assert view.reservation_label.isVisible()
    assert view.reservation_label.text().startswith("vLLM reserves 90 % of the GPU by design")
    assert view.reservation_label.text().endswith("KV cache 37 % full")


def test_a_hanging_server_shows_its_error_not_its_models(view):
    hung = dataclasses.replace(srv.ollama(), models=(), error="no answer in 2 s",
                               reachable=False, can_unload=False, unload_note="")
    view.set_server(hung, srv.snapshot(servers=(hung,)))
    assert view.error_label.text() == "⚠ Ollama's API: no answer in 2 s"
    assert view.no_models_label.text() == MODELS_UNKNOWN
    assert view.note_label.isHidden()
    assert all(r.model_id is None for r in view.rows)


@pytest.mark.parametrize("outcome,note,freed,line", [
    ("freed", "Ollama unloaded it: freed 4.4 GiB", 4724464025, "freed 4.4 GiB"),
    ("pending", "ComfyUI frees after the prompt it is running", None,
     "still pending — ComfyUI frees after the prompt it is running"),
    ("not freed", "NVML shows no drop after 15 s", None,
     "not freed — NVML shows no drop after 15 s"),
])
def test_the_outcome_of_an_unload_is_shown_beside_its_model(view, outcome, note, freed, line):
    o = srv.ollama()
    last = {"qwen2.5:7b": srv.outcome(o, "qwen2.5:7b", outcome, note, freed)}
    view.set_server(o, srv.snapshot(), last=last)
    assert view.note_of("qwen2.5:7b") == line
    assert view.button_of("qwen2.5:7b").isEnabled()  # it may be tried again


def test_an_unload_in_flight_disables_its_button(view, qtbot):
    o = srv.ollama()
    view.set_server(o, srv.snapshot(), pending={"qwen2.5:7b": srv.running(o, "qwen2.5:7b")})
    assert not view.button_of("qwen2.5:7b").isEnabled()
    assert view.note_of("qwen2.5:7b") == "unloading…"
    with qtbot.assertNotEmitted(view.request):  # nothing to send while it runs
        view.clicked("qwen2.5:7b")


def test_without_actions_every_button_is_disabled(view):
    view.set_server(srv.ollama(busy_model=False), srv.snapshot(), can_act=False)
    assert not view.button_of("qwen2.5:7b").isEnabled()
    assert view.button_of("qwen2.5:7b").toolTip() == "Actions are not available"


def test_rows_are_reused_and_extra_ones_hidden(view):
    view.set_server(srv.ollama(), srv.snapshot())
    rows = list(view.rows)
    view.set_server(srv.comfyui(), srv.snapshot())
    assert view.rows == rows
    assert view.rows[0].model_id == "all" and view.rows[1].model_id is None
    assert view.rows[1].button.isHidden()
