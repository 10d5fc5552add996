"""The results as the real ``estimate`` command answers: the three figures,
the bar against the GPU's free memory, fits or short by, the fixes as the
Doctor's controls, the contexts table; an unknown free memory reads "n/a"."""

from __future__ import annotations

import dataclasses

import pytest

from app.core.control.requests import FreeCache
from app.core.units import NA, fmt_bytes
from app.ui.estimate.fit_bar import bar_parts
from app.ui.estimate.fit_result import parse_result
from app.ui.estimate.fit_results import FitResults


@pytest.fixture
def view(qtbot):
    v = FitResults()
    qtbot.addWidget(v)
    v.resize(640, 900)
    v.show()
    return v


@pytest.fixture
def answer(llama_answer):
    return parse_result(llama_answer)


def test_the_three_figures_and_the_fit_on_a_gpu_it_fits(view, answer):
    fit = next(f for f in answer.gpus if f.fits)
    view.set_result(answer, fit.gpu)
    assert view.fit is fit
    assert view.figures() == {
        "peak": fmt_bytes(answer.peak_bytes), "reserved": fmt_bytes(answer.reserved_bytes),
        "needs": fmt_bytes(fit.needs_bytes), "free": fmt_bytes(fit.free_bytes),
        "margin": fmt_bytes(fit.margin_bytes)}
    assert view.verdict.text().startswith(f"Fits on GPU {fit.gpu}: ")
    assert view.figure_labels["needs"].toolTip().startswith("needs_bytes: reserved plus")
    # The bar: every kind at the peak, the rounding to reserved, the context to needs.
    assert view.bar.needs == fit.needs_bytes and view.bar.free == fit.free_bytes
    assert dict(view.bar.parts)["weights"] == answer.breakdown["weights"]
    assert view.legend.rows["kv_cache"][0] == "KV cache × batch"  # grows with the batch
    assert not answer.exact and view.bound.isVisible()  # a lower bound says so
    assert view.limits.isVisible() and answer.limits[0] in view.limits_text.text()


def test_short_by_with_the_ranked_fixes_as_controls(view, answer, qtbot):
    fit = next(f for f in answer.gpus if f.fits is False)
    view.set_result(answer, fit.gpu, can_act=True)
    assert view.verdict.text().startswith(
        f"Does not fit on GPU {fit.gpu}: short by {fmt_bytes(-fit.margin_bytes)}")
    assert view.verdict.property("level") == "short"
    assert [f.text for f in view.fixes.fixes][0].startswith(fit.fixes[0].text)
    assert view.fixes.isVisible()
    freeing = [f for f in fit.fixes if f.action == "free_cache"]
    assert freeing, "the demo's GPU 1 has a cache to free"
    (button,) = view.fixes.buttons[:1]
    with qtbot.waitSignal(view.request) as sent:
        button.click()
    assert sent.args[0] == FreeCache.of(freeing[0].pid, "")


def test_the_contexts_table_of_an_llm(view, answer):
    fit = answer.gpu("1")
    view.set_result(answer, "1")
    rows = view.context_table()
    assert len(rows) == len(answer.contexts) > 1
    for row, ctx in zip(rows, answer.contexts, strict=True):
        needs = ctx.reserved_bytes + fit.context_bytes
        assert row == [f"{ctx.context // 1024}k", fmt_bytes(ctx.kv_cache_bytes),
                       fmt_bytes(needs), "yes" if needs <= fit.free_bytes else "no"]


def test_free_memory_unknown_is_na_never_zero(view, answer):
    fit = dataclasses.replace(answer.gpus[0], free_bytes=None, fits=None, margin_bytes=None,
                              fixes=())
    unknown = dataclasses.replace(answer, gpus=(fit,))
    view.set_result(unknown, fit.gpu)
    assert view.figures()["free"] == NA and view.figures()["margin"] == NA
    assert view.verdict.property("level") == "unknown" and "n/a" in view.verdict.text()
    assert view.bar.free is None
    assert {row[3] for row in view.context_table()} == {NA}
    assert not view.fixes.isVisible()


def test_the_bar_parts_add_up_to_needs(answer):
    fit = answer.gpus[0]
    parts = bar_parts(answer.breakdown, answer.reserved_bytes, fit.needs_bytes)
    assert sum(b for _, b in parts) == fit.needs_bytes
    assert dict(parts)["context"] == fit.context_bytes


def test_an_answer_without_gpus_keeps_the_estimate(view, answer):
    bare = dataclasses.replace(answer, gpus=(), note="no GPU figures: NVML not found")
    view.set_result(bare, "0")
    assert view.fit is None and view.figures()["free"] == NA
    assert view.figures()["needs"] == fmt_bytes(answer.needs_bytes)
