"""Arrival parsing (Azure CSV, plain text) and generation (rate scaling, shapes)."""

from __future__ import annotations

import gzip

import numpy as np
import pytest

from tritonscale.simulate.arrivals import (
    SHAPES,
    TraceError,
    load_trace,
    parse_trace,
    parse_trace_text,
    rate_profile,
    rate_scale,
    shape_arrivals,
)

AZURE = """TIMESTAMP,ContextTokens,GeneratedTokens
2023-11-16 18:15:46.6805900,374,44
2023-11-16 18:15:50.9951690,396,109
2023-11-16 18:15:51.2224670,879,55
"""


def test_azure_csv_with_seven_fractional_digits() -> None:
    t = parse_trace_text(AZURE)
    assert t == pytest.approx([0.0, 4.314579, 4.541877], abs=1e-6)


def test_azure_csv_timestamp_column_anywhere_and_unsorted() -> None:
    text = "id,TIMESTAMP\n1,2023-11-16 18:15:50.5\n2,2023-11-16 18:15:46.5\n"
    assert parse_trace_text(text) == pytest.approx([0.0, 4.0])


def test_a_timestamp_column_of_seconds() -> None:
    text = "Timestamp,Model,Request tokens\n5,ChatGPT,100\n45.5,GPT-4,30\n12.5,ChatGPT,3\n"
    assert parse_trace_text(text) == pytest.approx([0.0, 7.5, 40.5])
    assert parse_trace_text("TIMESTAMP\n1700000000.5\n1700000001.0\n") == pytest.approx([0.0, 0.5])


def test_a_single_timestamp_column_with_its_header() -> None:
    text = "TIMESTAMP\n2023-11-16 18:15:46.6805900\n2023-11-16 18:15:47.1805900\n"
    assert parse_trace_text(text) == pytest.approx([0.0, 0.5])


@pytest.mark.parametrize("text, expected", [
    ("0.5\n1\n\n# comment\n2.25\n", [0.0, 0.5, 1.75]),  # from the first arrival, as timestamps are
    ("3\n1\n2\n", [0.0, 1.0, 2.0]),  # sorted
    ("1700158546.680590\n1700158547.180590\n", [0.0, 0.5]),  # seconds since the epoch
    ("2023-11-16T18:15:46.68Z\n2023-11-16T18:15:47.18Z\n", [0.0, 0.5]),
    ("2023-11-16T18:15:46.6805900+01:00\n2023-11-16T18:15:48.6805900+01:00\n", [0.0, 2.0]),
    ("2023-11-16 18:15:46\n2023-11-16 18:16:46\n", [0.0, 60.0]),
    ("20231116T181546\n20231116T181547.5\n", [0.0, 1.5]),  # ISO 8601's basic format: a full date too
])
def test_plain_text(text: str, expected: list[float]) -> None:
    assert parse_trace_text(text) == pytest.approx(expected)


@pytest.mark.parametrize("text, expected", [
    # Unix time in ms, us and ns: read in its unit, not as seconds (a 3 s trace read as 50 min)
    ("timestamp,x\n1700158546680,1\n1700158547680,2\n1700158549680,3\n", [0.0, 1.0, 3.0]),
    ("1700158546680123\n1700158547180123\n", [0.0, 0.5]),
    ("TIMESTAMP\n1700158546680123456\n1700158548680123456\n", [0.0, 2.0]),
    # seconds, however large a relative trace of them gets, stay seconds
    ("TIMESTAMP\n0\n99999999999\n", [0.0, 99999999999.0]),
])
def test_numbers_that_can_only_be_unix_time_in_a_finer_unit(text: str, expected: list[float]) -> None:
    assert parse_trace_text(text) == pytest.approx(expected)


MOONCAKE = """{"timestamp": 3052, "input_length": 7234, "output_length": 794, "hash_ids": [0, 28, 29]}
{"timestamp": 0, "input_length": 6755, "output_length": 500, "hash_ids": [0, 1, 2, 3]}

{"timestamp": 0, "input_length": 7319, "output_length": 490, "hash_ids": [0, 14]}
{"timestamp": 10535.5, "input_length": 672, "output_length": 26, "hash_ids": [46, 47]}
"""


def test_json_lines_in_mooncakes_milliseconds() -> None:
    assert parse_trace_text(MOONCAKE) == pytest.approx([0.0, 0.0, 3.052, 10.5355])
    stamps = '{"TimeStamp": "2023-11-16T18:15:47.18Z", "id": 2}\n{"TimeStamp": "2023-11-16T18:15:46.68Z"}\n'
    assert parse_trace_text(stamps) == pytest.approx([0.0, 0.5])
    assert parse_trace_text('{"timestamp": 1700158546680}\n{"timestamp": 1700158547180}\n') == pytest.approx([0, 0.5])


def test_a_json_lines_trace_file(tmp_path) -> None:
    (tmp_path / "t.jsonl.gz").write_bytes(gzip.compress(MOONCAKE.encode()))
    assert load_trace(str(tmp_path / "t.jsonl.gz"))[-1] == pytest.approx(10.5355)


@pytest.mark.parametrize("text, message", [
    ("1.0\nabc\n", "line 2: neither seconds nor an ISO timestamp"),
    ("1.0\n2023-11-16T18:15:46\n", "line 2: a timestamp after lines of seconds"),
    ("-1\n", "line 1: arrival must be a finite number of seconds >= 0"),
    ("# only a comment\n\n", "no arrivals"),
    ("TIMESTAMP,x\n", "no arrivals after the header"),
    ("TIMESTAMP,x\nyesterday,1\n", "line 2: not a timestamp"),
    # numpy reads '' and 'NaT' as NaT, a date in 1677: refused by line, not a trace of 342 years
    ("TIMESTAMP,x\n2023-11-16 18:15:46,1\n,5\n2023-11-16 18:15:47,1\n", "line 3: not a timestamp: ''"),
    ("TIMESTAMP,x\n2023-11-16 18:15:46,1\nNaT,5\n", "line 3: not a timestamp: 'NaT'"),
    # the line is the file's, blank lines and quoted multi-line fields counted; a column of seconds
    # names its own bad value, not its first (which was reported as 'not a timestamp')
    ("TIMESTAMP,x\n2023-11-16 18:15:46.1,1\n\n\n2023-11-16 18:15:47.1,1\nbogus,1\n",
     "line 6: not a timestamp: 'bogus'"),
    ("TIMESTAMP,x\n1.0,1\n\n2.0,1\nabc,1\n", "line 5: not a number of seconds .* 'abc'"),
    ("TIMESTAMP,x\n1.0,\"a\nb\"\n2.0,1\nq,1\n", "line 5: not a number of seconds .* 'q'"),
    ("TIMESTAMP,x\n1.0,1\n2.0,1\nNaN,1\n", "line 4: arrival must be a finite number >= 0, got NaN"),
    # negatives are refused in every form, as in plain text
    ("TIMESTAMP,x\n1.0,1\n-2.0,1\n", "line 3: arrival must be a finite number >= 0, got -2.0"),
    ('{"timestamp": 0}\n{"timestamp": -5}\n', 'line 2: "timestamp" must be a finite number of milliseconds >= 0'),
    # a header that is not comma-separated, or names no TIMESTAMP, is said to be one
    ("TIMESTAMP;x\n0.5;1\n", "line 1: no TIMESTAMP column .*comma-separated.*: 'TIMESTAMP;x'"),
    ("TIMESTAMP\tx\n0.5\t1\n", "line 1: no TIMESTAMP column"),
    ("\n# c\ntime,model\n0.5,a\n", "line 3: no TIMESTAMP column"),
    ("1.0\nid,model\n", "line 2: neither seconds nor an ISO timestamp"),  # a header is a first line
    ('{"timestamp": 0}\n\n{"timestamp": 1\n', "line 3: not a JSON object"),
    ('{"timestamp": 0}\n{"time": 1}\n', 'line 2: no "timestamp" key'),
    ('{"timestamp": 0}\n[1]\n', "line 2: not a JSON object"),
    ('{"timestamp": 0}\n{"timestamp": NaN}\n', 'line 2: "timestamp" must be a finite number of milliseconds'),
    ('{"timestamp": 0}\n{"timestamp": 1' + '0' * 400 + '}\n', 'line 2: "timestamp" must be a finite number of milli'),
    # the value as JSON writes it, not as Python does (True, None)
    ('{"timestamp": true}\n', 'line 1: "timestamp" must be milliseconds or an ISO timestamp, got true'),
    ('{"timestamp": null}\n', 'line 1: "timestamp" must be milliseconds or an ISO timestamp, got null'),
    # json's decoder recurses per level: a RecursionError, no ValueError, came out as a traceback (session 104)
    ('{"timestamp": ' + '[' * 100_000 + ']' * 100_000 + '}\n', "line 1: .*nested too deeply"),
    ('[' * 100_000 + ']' * 100_000 + '\n', "nested too deeply"),
    ('{"timestamp": 0}\n{"timestamp": "2023-11-16T18:15:46"}\n', "line 2: a timestamp after lines of numbers"),
    ('{"timestamp": "2023-11-16T18:15:46"}\n{"timestamp": 5}\n', "line 2: a number after lines of timestamps"),
    ('{"timestamp": "2023-11-16T18:15:46"}\n{"timestamp": "soon"}\n', "line 2: not a timestamp: 'soon'"),
    # an ISO timestamp opens with a full date: numpy read '29' as the year 29 and '2023' as 2023-01-01
    ('{"timestamp": "29"}\n{"timestamp": "624"}\n', "line 1: not a timestamp: '29'"),
    ("TIMESTAMP\n2023-11-16 18:15:46\n2023-11-16 18:15:47\n2023\n", "line 4: not a timestamp: '2023'"),
    ("2023-11-16T18:15:46\n2023-11\n", "line 2: neither seconds nor an ISO timestamp: '2023-11'"),
    # zone-less and zoned timestamps are not put on one clock (zone-less was taken as UTC)
    ("2023-11-16T18:00:00.02\n2023-11-16T18:00:01.5+05:00\n", "line 2: .* names a zone .* line 1's timestamp does not"),
    ('{"timestamp": "2023-11-16T18:00:00Z"}\n{"timestamp": "2023-11-16T18:00:01"}\n',
     "line 2: .* names no zone .* line 1's timestamp does"),
    # ... past the first 50 rows too (a fast path looked only at those)
    ("TIMESTAMP,x\n" + "".join(f"2023-11-16 18:00:{i:02d},1\n" for i in range(60)) + "2023-11-16 18:01:00+05:00,1\n",
     "line 62: .* names a zone .* line 2's timestamp does not"),
])
def test_bad_traces_name_the_line(text: str, message: str) -> None:
    with pytest.raises(TraceError, match=message):
        parse_trace_text(text, "t.txt")


def test_a_unit_told_for_a_trace_of_dates_is_refused(tmp_path) -> None:
    """`--trace-unit ms` on the Azure trace (dates, no plain number) was dropped without a word, where the
    simulator refuses a flag the run does not read (found by a documentation audit, session 80)."""
    path = tmp_path / "azure.csv"
    path.write_text("TIMESTAMP\n2023-11-16 18:15:46.6805900\n2023-11-16 18:15:47.1805900\n")
    assert len(load_trace(str(path))) == 2
    with pytest.raises(TraceError, match=r"its timestamps are dates \(ISO 8601\), not numbers: --trace-unit ms"):
        load_trace(str(path), "ms")
    numbers = tmp_path / "numbers.txt"
    numbers.write_text("0\n1500\n")
    assert list(load_trace(str(numbers), "ms")) == [0.0, 1.5]  # a unit for plain numbers: read in it


def test_load_trace_missing_file(tmp_path) -> None:
    with pytest.raises(TraceError, match="cannot read"):
        load_trace(str(tmp_path / "nope.csv"))


def test_load_trace_reads_gzip_by_its_magic_bytes(tmp_path) -> None:
    (tmp_path / "t.csv.gz").write_bytes(gzip.compress(AZURE.encode()))
    (tmp_path / "no-suffix").write_bytes(gzip.compress(("\ufeff" + AZURE.replace("\n", "\r\n")).encode()))
    for name in ("t.csv.gz", "no-suffix"):  # BOM and CRLF too
        assert load_trace(str(tmp_path / name)) == pytest.approx([0.0, 4.314579, 4.541877], abs=1e-6)
    (tmp_path / "cut.gz").write_bytes(gzip.compress(AZURE.encode())[:20])
    with pytest.raises(TraceError, match="a truncated gzip file"):
        load_trace(str(tmp_path / "cut.gz"))
    damaged = bytearray(gzip.compress("\n".join(str(i / 100) for i in range(20000)).encode()))
    damaged[200:260] = bytes(b ^ 0xFF for b in damaged[200:260])  # a damaged deflate stream: zlib.error
    (tmp_path / "flip.gz").write_bytes(bytes(damaged))
    with pytest.raises(TraceError, match="a corrupt gzip file"):
        load_trace(str(tmp_path / "flip.gz"))
    (tmp_path / "bin").write_bytes(b"\xff\xfe\x00\x81")
    with pytest.raises(TraceError, match="not UTF-8 text"):
        load_trace(str(tmp_path / "bin"))
    (tmp_path / "utf16").write_bytes("0.5\n1.5\n".encode("utf-16"))
    with pytest.raises(TraceError, match=r"utf16: not UTF-8 text \(byte 0: b'\\xff'\); a trace is read as UTF-8"):
        load_trace(str(tmp_path / "utf16"))


def test_rate_scale_keeps_shape_and_is_deterministic() -> None:
    rng = np.random.default_rng(1)
    base = np.sort(np.concatenate([rng.uniform(0, 100, 200), rng.uniform(100, 200, 600)]))  # 2 then 6 rps
    a = rate_scale(base, 50.0, bin_s=10.0, seed=3)
    b = rate_scale(base, 50.0, bin_s=10.0, seed=3)
    assert np.array_equal(a, b)
    assert np.all(np.diff(a) >= 0)
    prof = rate_profile(a, 100.0, float(base[-1]))
    assert prof[0] == pytest.approx(100.0, rel=0.05)  # 2 rps x 50
    assert prof[1] == pytest.approx(300.0, rel=0.05)  # 6 rps x 50
    assert rate_scale(base, 1.0) is base  # x1 replays the trace itself


@pytest.mark.parametrize("shape", SHAPES)
def test_shapes(shape: str) -> None:
    t = shape_arrivals(shape, 100.0, 600.0, seed=7)
    assert np.array_equal(t, shape_arrivals(shape, 100.0, 600.0, seed=7))
    assert 0 <= t[0] and t[-1] <= 600.0 and np.all(np.diff(t) >= 0)
    assert 0.7 * 60_000 < len(t) < 1.3 * 60_000  # every shape averages about the base rate


def test_a_json_array_of_objects_is_read_as_json_lines_are():
    """Tools that write one JSON document give ``[{...}, ...]``; it said "neither seconds nor an ISO timestamp"."""
    from tritonscale.simulate.arrivals import TraceError, parse_trace_text

    t = parse_trace_text('[{"timestamp": 1000, "input_length": 5}, {"timestamp": 3500}, {"Timestamp": 1500}]')
    assert list(t) == [0.0, 0.5, 2.5]  # milliseconds, as in JSON Lines
    iso = parse_trace_text('[\n  {"timestamp": "2023-11-16T18:15:46Z"},\n  {"timestamp": "2023-11-16T18:15:48Z"}\n]')
    assert list(iso) == [0.0, 2.0]
    for text, said in [
        ("[1.5, 2.0]", "t.json: item 1: not a JSON object; a JSON array holds objects with a \"timestamp\" key"),
        ('[{"timestamp": 1}, {"ts": 2}]', 't.json: item 2: no "timestamp" key'),
        ('[{"timestamp": "2023-11-16T18:15:46Z"}, {"timestamp": "soon"}]', "t.json: item 2: not a timestamp: 'soon'"),
        ("[]", "t.json: no arrivals"),
        ('[{"timestamp": 1},', "t.json: not a JSON array (Expecting value"),
    ]:
        with pytest.raises(TraceError) as err:
            parse_trace_text(text, "t.json")
        assert str(err.value).startswith(said), str(err.value)


@pytest.mark.parametrize("text, unit, expected", [
    ("0\n500\n1500\n", "ms", [0.0, 0.5, 1.5]),  # relative milliseconds, read as seconds without the unit
    ("TIMESTAMP,x\n29,1\n624,1\n1130,1\n", "ms", [0.0, 0.595, 1.101]),
    ("0\n2500000\n", "us", [0.0, 2.5]),
    ('{"timestamp": 0.25}\n{"timestamp": 1.5}\n', "s", [0.0, 1.25]),  # JSON Lines written in seconds
    ('{"timestamp": 250}\n{"timestamp": 1500}\n', None, [0.0, 1.25]),  # Mooncake's ms by default
    ("1700158546680\n1700158547180\n", "s", [0.0, 0.5]),  # Unix time in ms is told by its size still
    ("2023-11-16T18:15:46Z\n2023-11-16T18:15:47Z\n", "ms", [0.0, 1.0]),  # timestamps carry their own unit
])
def test_trace_unit_reads_plain_numbers(text: str, unit: str | None, expected: list[float]) -> None:
    assert parse_trace_text(text, "t", unit) == pytest.approx(expected)


def test_a_trace_says_how_its_numbers_were_read() -> None:
    assert (parse_trace("29\n624\n").unit, parse_trace("29\n624\n").by_size) == ("s", False)
    assert parse_trace('{"timestamp": 29}\n{"timestamp": 624}\n').unit == "ms"
    assert (parse_trace("1700158546680\n").unit, parse_trace("1700158546680\n").by_size) == ("ms", True)
    assert parse_trace("2023-11-16T18:15:46Z\n").unit == ""


def test_a_trace_past_the_cap_is_refused_read_or_unpacked(tmp_path, monkeypatch):
    """`simulate --trace /dev/zero` read until the kernel killed it at 23 GB (an exploration, session 55);
    a gzip that unpacks to more than the cap is the same in a small file."""
    from tritonscale.simulate import arrivals

    monkeypatch.setattr(arrivals, "MAX_TRACE_BYTES", 1 << 10)
    plain = tmp_path / "big.csv"
    plain.write_text("\n".join(f"{i * 0.01:.2f}" for i in range(400)))  # > 1 KiB
    with pytest.raises(arrivals.TraceError, match=r"big.csv: it holds more than 0 GiB"):
        arrivals.read_trace(str(plain))
    packed = tmp_path / "bomb.gz"
    packed.write_bytes(gzip.compress(b"0\n" * 4096))  # ~40 bytes packed, 8 KiB unpacked
    assert packed.stat().st_size < 1 << 10
    with pytest.raises(arrivals.TraceError, match=r"bomb.gz: it unpacks to more than"):
        arrivals.read_trace(str(packed))
    small = tmp_path / "small.csv"
    small.write_text("\n".join(f"{i * 0.5:.1f}" for i in range(60)))
    assert len(arrivals.read_trace(str(small)).times) == 60
