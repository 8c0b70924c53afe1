"""Trace files: validation of bad input, import (CSV/Parquet/TensorBoard), splits."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pytest

from mara_env.traces import (
    MIN_POINTS,
    TraceError,
    TraceSet,
    hash_split,
    import_traces,
    read_traces,
    smooth_curve,
    validate_traces,
)


def _table(n_traces=2, points=12):
    rows = []
    for t in range(n_traces):
        for s in range(points):
            rows.append((f"t{t}", "tabular", f"src{t}", float(s + 1), 2.0 / (s + 1) ** 0.5))
    return pd.DataFrame(rows, columns=["trace_id", "family", "source", "step", "loss"])


def _write(df, path):
    if path.suffix == ".csv":
        df.to_csv(path, index=False)
    else:
        df.to_parquet(path, index=False)
    return path


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_import_round_trip(tmp_path, suffix):
    src = _write(_table(), tmp_path / f"in{suffix}")
    out = tmp_path / "lib.parquet"
    import_traces([src], out)
    back = read_traces(out)
    assert list(back.columns) == ["trace_id", "family", "source", "step", "loss", "split"]
    assert back["trace_id"].nunique() == 2 and len(back) == 24


def _corrupt(kind):
    df = _table()
    if kind == "missing":
        return df.drop(columns=["loss"]), r"missing column\(s\) \['loss'\]"
    if kind == "nan":
        df.loc[5, "loss"] = np.nan
        return df, r"trace 't0', row 5: loss is \(empty\); expected a finite number"
    if kind == "inf":
        df.loc[14, "step"] = np.inf
        return df, r"trace 't1', row 14: step is inf"
    if kind == "unsorted":
        df.loc[3, "step"] = 1.0
        return df, r"trace 't0', row 3: step 1 does not increase"
    if kind == "negative":
        df.loc[7, "loss"] = -0.5
        return df, r"trace 't0', row 7: loss -0.5 is negative"
    if kind == "negative_step":  # a curve shifted below 0: work cannot be negative
        df["step"] -= 20.0
        return df, r"trace 't0', row 0: step -19 is negative; steps \(cumulative work\)"
    if kind == "short":
        return df.iloc[: 12 + MIN_POINTS - 1], rf"trace 't1', row 12: has {MIN_POINTS - 1} point"
    if kind == "interleaved":
        return pd.concat([df.iloc[:6], df.iloc[12:], df.iloc[6:12]]), "not contiguous"
    if kind == "empty":
        return df.iloc[:0], "no rows"
    raise AssertionError(kind)


KINDS = ["missing", "nan", "inf", "unsorted", "negative", "negative_step", "short"]
KINDS += ["interleaved", "empty"]


@pytest.mark.parametrize("kind", KINDS)
def test_bad_input_is_rejected_naming_file_trace_and_row(tmp_path, kind):
    df, message = _corrupt(kind)
    src = _write(df, tmp_path / "bad.csv")
    with pytest.raises(TraceError, match=message) as exc:
        read_traces(src)
    assert "bad.csv" in str(exc.value)


@pytest.mark.parametrize("kind", ["nan", "unsorted", "missing"])
def test_failed_import_leaves_library_untouched(tmp_path, kind):
    lib = tmp_path / "lib.parquet"
    import_traces([_write(_table(), tmp_path / "good.csv")], lib)
    before = lib.read_bytes()
    df, _ = _corrupt(kind)
    df["trace_id"] = df["trace_id"].astype(str) + "-new" if "trace_id" in df else None
    with pytest.raises(TraceError):
        import_traces([_write(df, tmp_path / "bad.csv")], lib)
    assert lib.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.csv", "good.csv", "lib.parquet"]


def test_duplicate_trace_ids_across_inputs_rejected(tmp_path):
    a = _write(_table(), tmp_path / "a.csv")
    with pytest.raises(TraceError, match="occurs in more than one input"):
        import_traces([a, a], tmp_path / "lib.parquet")


@pytest.mark.parametrize("n_traces", [1, 2])
def test_reimporting_an_id_already_in_the_library_says_so(tmp_path, n_traces):
    src = _write(_table(n_traces), tmp_path / "a.csv")
    lib = tmp_path / "lib.parquet"
    import_traces([src], lib)
    before = lib.read_bytes()
    with pytest.raises(TraceError, match=r"a.csv: trace id 't0' is already in the library"):
        import_traces([src], lib)
    assert lib.read_bytes() == before


def test_missing_and_unknown_files(tmp_path):
    with pytest.raises(TraceError, match="no such trace file"):
        read_traces(tmp_path / "nope.parquet")
    (tmp_path / "x.txt").write_text("hello")
    with pytest.raises(TraceError, match="unknown trace file type"):
        read_traces(tmp_path / "x.txt")
    (tmp_path / "broken.parquet").write_bytes(b"not parquet at all")
    with pytest.raises(TraceError, match="not a readable Parquet file"):
        read_traces(tmp_path / "broken.parquet")


@pytest.mark.parametrize(
    ("curve", "first"),
    [("constant", "0.5"), ("zero", "0"), ("rising", "0.5"), ("below_floor", "5e-05")],
)
def test_import_refuses_a_curve_that_never_falls(tmp_path, curve, first):
    df = _table()
    rows = df.index[df["trace_id"] == "t1"]
    steps = np.arange(len(rows))
    loss = {
        "constant": np.full(len(rows), 0.5),
        "zero": np.zeros(len(rows)),
        "rising": 0.5 + 0.01 * steps,
        "below_floor": np.r_[5e-5, np.zeros(len(rows) - 1)],  # flat at the floor
    }[curve]
    df.loc[rows, "loss"] = loss
    src = _write(df, tmp_path / "in.csv")
    message = rf"in.csv: trace 't1', row 12: the loss never falls below its first value {first} "
    with pytest.raises(TraceError, match=message):
        import_traces([src], tmp_path / "lib.parquet")
    assert not (tmp_path / "lib.parquet").exists()
    read_traces(src)  # a library may hold such curves; only the import refuses them


def test_shipped_library_merges_into_an_import(tmp_path):
    from mara_env.traces import SHIPPED_LIBRARY

    lib = tmp_path / "lib.parquet"
    lib.write_bytes(SHIPPED_LIBRARY.read_bytes())
    merged = import_traces([_write(_table(), tmp_path / "mine.csv")], lib)
    assert merged["trace_id"].nunique() == read_traces(SHIPPED_LIBRARY)["trace_id"].nunique() + 2


@pytest.mark.parametrize("sep", [";", "\t"])
def test_csv_with_another_delimiter_gets_a_hint(tmp_path, sep):
    src = tmp_path / "in.csv"
    _table().to_csv(src, index=False, sep=sep)
    hint = re.escape(f"separated by {sep!r}; expected a comma-separated file")
    with pytest.raises(TraceError, match=f"in.csv: the header .* reads as one column: .*{hint}"):
        read_traces(src)


def test_import_out_must_be_a_library_file(tmp_path):
    src = _write(_table(), tmp_path / "in.csv")
    with pytest.raises(TraceError, match="is a directory; expected the library file"):
        import_traces([src], tmp_path)
    with pytest.raises(TraceError, match="lib: unknown library file type"):
        import_traces([src], tmp_path / "lib")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.csv"]


def test_directory_without_event_files_is_named(tmp_path):
    (tmp_path / "events").mkdir()
    with pytest.raises(TraceError, match="events: a directory without TensorBoard event files"):
        read_traces(tmp_path / "events")


def test_tensorboard_import(tmp_path):
    from tensorboardX import SummaryWriter

    w = SummaryWriter(str(tmp_path / "run1"))
    for step in range(1, 30):
        w.add_scalar("train/loss", 3.0 / step, step)
        w.add_scalar("lr", 0.1, step)
    w.close()
    with pytest.raises(TraceError, match="several scalar tags"):
        read_traces(tmp_path / "run1")
    with pytest.raises(TraceError, match="no scalar tag 'val/loss'"):
        read_traces(tmp_path / "run1", tag="val/loss")
    df = read_traces(tmp_path / "run1", tag="train/loss")
    assert len(df) == 29 and df["loss"].iloc[-1] == pytest.approx(3.0 / 29)


def test_split_is_a_stable_function_of_source():
    assert hash_split("dataset=iris;seed=1") == hash_split("dataset=iris;seed=1")
    splits = {hash_split(f"s{i}") for i in range(200)}
    assert splits == {"train", "val", "test"}
    bad = validate_traces(_table()).assign(split="holdout")
    with pytest.raises(TraceError, match="split 'holdout' is not one of"):
        validate_traces(bad)


def test_smoothed_curve_is_monotone_and_reachable():
    rng = np.random.default_rng(0)
    loss = np.exp(-np.linspace(0, 3, 100) + rng.normal(0, 0.1, 100))
    smooth = smooth_curve(loss)
    assert (np.diff(smooth) <= 1e-12).all()
    # every smoothed value is reached by some raw point no later than the window allows
    for j in range(len(loss)):
        assert (loss[: j + 3] <= smooth[j] + 1e-12).any()


def test_traceset_subset_keeps_curves():
    ts = TraceSet.from_frame(validate_traces(_table(3)))
    sub = ts.subset(np.array([False, True, True]))
    assert list(sub.ids) == ["t1", "t2"]
    np.testing.assert_array_equal(sub.trace(0)[1], ts.trace(1)[1])


def test_every_smoothed_value_is_reached_by_a_raw_point():
    # On plateaus of equal values, log/exp rounding must not put a target an ulp below
    # every raw point (a task that could never complete).
    from mara_env.traces import smooth_curve

    rng = np.random.default_rng(0)
    for _ in range(200):
        levels = rng.choice([0.1, 0.3, 0.55, 0.7, 0.123, 1 / 3], size=rng.integers(1, 5))
        loss = np.repeat(np.sort(levels)[::-1], rng.integers(3, 12, size=len(levels)))
        smooth = smooth_curve(loss)
        for j in range(len(loss)):
            assert (loss[: j + 3] <= smooth[j]).any(), (loss, j)
