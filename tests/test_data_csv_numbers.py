"""CSV numbers written with leading zeros, which pandas (🤗 datasets' CSV reader) drops, against
``datasets.load_dataset("csv")`` on the same file."""

from __future__ import annotations

import datasets
import pytest

from polyrl.data import load_dataset
from polyrl.errors import ConfigError

#: rows pandas types at a time in 🤗 datasets' CSV reader (its CsvConfig.chunksize)
PANDAS_BLOCK = 10_000


@pytest.mark.parametrize("cell", ["007", '"007"', " 0042", "-05", "007.5"])
def test_a_number_with_leading_zeros_in_a_csv_is_refused_naming_its_line(tmp_path, cell):
    """datasets reads 007 (quoted or not) as 7: a reward got 7, silently. The cell is named."""
    path = tmp_path / "qa.csv"
    path.write_text(f"prompt,answer\nWhat is 2 + 3?,5\n\nWhat is the code?,{cell}\n")
    read = datasets.load_dataset("csv", data_files=str(path), split="train", cache_dir=str(tmp_path / "hf"))
    assert str(read[1]["answer"]) != cell.strip().strip('"')  # why: datasets drops the zeros
    with pytest.raises(ConfigError) as err:
        load_dataset(path=str(path), cache_dir=str(tmp_path / "c"))
    assert str(err.value).startswith(f"data.path: {path}:4: column 'answer' holds {cell.strip(chr(34))!r}, which "
                                     "pandas (🤗 datasets' CSV reader, and so TRL) reads as the number "), str(err.value)
    assert "its leading zeros dropped" in str(err.value) and "JSONL or Parquet" in str(err.value)


def test_leading_zeros_in_a_later_file_are_found_in_its_own_lines(tmp_path):
    (tmp_path / "a.csv").write_text("prompt,answer\na,1\nb,2\n")
    (tmp_path / "b.csv").write_text("prompt,answer\nc,3\nd,08\n")
    with pytest.raises(ConfigError, match=r"b.csv:3: column 'answer' holds '08', which pandas"):
        load_dataset(path=str(tmp_path / "*.csv"), cache_dir=str(tmp_path / "c"))


def test_zeros_that_are_text_or_keep_the_value_are_read_as_datasets_reads_them(tmp_path):
    """0, 0.5, a text column with 007 beside words, and 05 inside a prompt: no error, the rows
    exactly datasets' (numbers stay numbers: a CSV has no types, pandas' guess is TRL's too)."""
    path = tmp_path / "qa.csv"
    path.write_text("prompt,answer,code,score\nMeet at 05:00?,0,007,0.5\nWhy?,10,abc,1\n")
    rows = load_dataset(path=str(path), cache_dir=str(tmp_path / "c")).rows
    expected = datasets.load_dataset("csv", data_files=str(path), split="train", cache_dir=str(tmp_path / "hf"))
    assert rows == expected.to_list()
    assert [r["code"] for r in rows] == ["007", "abc"] and [r["answer"] for r in rows] == [0, 10]


@pytest.mark.parametrize("blank", ["   ", "\t", " \t "])
def test_a_line_of_spaces_pandas_skips_does_not_shift_the_rows(tmp_path, blank):
    """pandas skips a line of spaces or tabs; counted as a row here, the cell after it was paired
    with the next row's value, and a leading zero in the last row was an IndexError traceback."""
    path = tmp_path / "qa.csv"
    path.write_text(f"prompt,answer\nWhat is 2 + 3?,5\n{blank}\nWhat is 1 + 1?,2\nWhat is the code?,007\n")
    read = datasets.load_dataset("csv", data_files=str(path), split="train", cache_dir=str(tmp_path / "hf"))
    assert read["answer"] == [5, 2, 7]  # why: the blank line is no row
    with pytest.raises(ConfigError) as err:
        load_dataset(path=str(path), cache_dir=str(tmp_path / "c"))
    assert str(err.value).startswith(f"data.path: {path}:5: column 'answer' holds '007', which pandas "
                                     "(🤗 datasets' CSV reader, and so TRL) reads as the number 7,"), str(err.value)


def test_leading_zeros_in_a_file_of_numbers_beside_a_file_of_text_are_refused(tmp_path):
    """A glob's files are typed one by one: b.csv's answers are numbers (7), cast to the text "7" of
    a.csv's column, so a column of text did not guard them; datasets gives "7" too."""
    (tmp_path / "a.csv").write_text("prompt,answer\na,abc\nb,6\n")
    (tmp_path / "b.csv").write_text("prompt,answer\nc,007\nd,8\n")
    files = [str(tmp_path / "a.csv"), str(tmp_path / "b.csv")]
    read = datasets.load_dataset("csv", data_files=files, split="train", cache_dir=str(tmp_path / "hf"))
    assert read["answer"][2] == "7"  # why: the zeros are gone, as text
    with pytest.raises(ConfigError) as err:
        load_dataset(path=str(tmp_path / "*.csv"), cache_dir=str(tmp_path / "c"))
    assert str(err.value).startswith(f"data.path: {tmp_path / 'b.csv'}:2: column 'answer' holds '007', which pandas "
                                     "(🤗 datasets' CSV reader, and so TRL) reads as the number 7, then as the text "
                                     "'7'"), str(err.value)


def test_leading_zeros_in_a_later_block_of_numbers_in_one_file_are_refused(tmp_path):
    """pandas types each 10,000 rows of a file on its own: a block of numbers after a block of text."""
    path = tmp_path / "qa.csv"
    text = [f"q{i},abc{i}" for i in range(PANDAS_BLOCK)]
    path.write_text("prompt,answer\n" + "\n".join([*text, "r,5", "s,042", "t,8"]) + "\n")
    with pytest.raises(ConfigError, match=rf"qa.csv:{PANDAS_BLOCK + 3}: column 'answer' holds '042', which pandas .* "
                                          r"the number 42, then as the text '42'"):
        load_dataset(path=str(path), cache_dir=str(tmp_path / "c"))


def test_zeros_in_a_text_column_of_several_files_are_kept_as_written(tmp_path):
    """A cell of a file whose column is text keeps its zeros: only cells pandas read as numbers are refused."""
    (tmp_path / "a.csv").write_text("prompt,code\na,abc\nb,007\n")
    (tmp_path / "b.csv").write_text("prompt,code\nc,xyz\nd,0042\n")
    rows = load_dataset(path=str(tmp_path / "*.csv"), cache_dir=str(tmp_path / "c")).rows
    assert [r["code"] for r in rows] == ["abc", "007", "xyz", "0042"]


@pytest.mark.parametrize(("cell", "read"), [("1.50", 1.5), ("1e3", 1000.0), ("true", True)])
def test_other_renderings_keep_the_value_and_the_answer_rewards_score_the_text_as_written(tmp_path, cell, read):
    """1.50, 1e3, true reach the rewards as pandas reads them (TRL's rows hold the same), not
    refused as leading zeros are: the value is kept, and exact_match / numeric_match compare values,
    so a completion that writes the cell as the file does scores 1."""
    from polyrl.rewards.builtin import exact_match, numeric_match
    from polyrl.types import RewardContext

    path = tmp_path / "qa.csv"
    path.write_text(f"prompt,answer\nWhat is it?,{cell}\nWhat else?,{'false' if read is True else 2}\n")
    rows = load_dataset(path=str(path), cache_dir=str(tmp_path / "c")).rows
    expected = datasets.load_dataset("csv", data_files=str(path), split="train", cache_dir=str(tmp_path / "hf"))
    assert rows == expected.to_list() and rows[0]["answer"] == read and type(rows[0]["answer"]) is type(read)
    context = RewardContext(rows=rows[:1], wanted=("exact_match",), options={})
    assert exact_match([f"The answer is {cell}"], context) == [1.0]
    if not isinstance(read, bool):
        assert numeric_match([f"The answer is {cell}"], context) == [1.0]


@pytest.mark.parametrize("other", ["1.5", ""])
def test_an_integer_a_float_column_rounds_is_refused_naming_its_line(tmp_path, other):
    """Beside a fraction or an empty cell pandas reads the column as float64: 12345678901234567
    reached the rewards as 1.2345678901234568e+16, another answer, silently."""
    path = tmp_path / "qa.csv"
    path.write_text(f"prompt,answer\nWhat is 2 + 3?,{other}\nWhat is the id?,12345678901234567\n")
    read = datasets.load_dataset("csv", data_files=str(path), split="train", cache_dir=str(tmp_path / "hf"))
    assert read[1]["answer"] != 12345678901234567  # why: datasets rounds it
    with pytest.raises(ConfigError) as err:
        load_dataset(path=str(path), cache_dir=str(tmp_path / "c"))
    assert str(err.value).startswith(f"data.path: {path}:3: column 'answer' holds the integer 12345678901234567, "
                                     "which pandas (🤗 datasets' CSV reader, and so TRL) reads as the number "
                                     "1.2345678901234568e+16"), str(err.value)
    assert "JSONL (that value quoted as a string) or Parquet" in str(err.value)


@pytest.mark.parametrize("cell", ["123456789012345678901", '"-12345678901234567890"'])
def test_an_integer_past_64_bits_names_its_cell_not_a_broken_file(tmp_path, cell):
    """pandas cannot read it: the error was "Python int too large to convert to C long. Fix: check
    that the file is a valid csv file (re-export it)", for a valid file, naming no cell."""
    path = tmp_path / "qa.csv"
    path.write_text(f"prompt,answer\nWhat is 2 + 3?,5\nWhat is 25!?,{cell}\n")
    with pytest.raises(ConfigError) as err:
        load_dataset(path=str(path), cache_dir=str(tmp_path / "c"))
    assert str(err.value).startswith(f"data.path: {path}:3: column 'answer' holds the integer {cell.strip(chr(34))}, "
                                     "past the 64 bits"), str(err.value)


def test_long_integers_pandas_keeps_are_read_as_datasets_reads_them(tmp_path):
    """A uint64, an int64 and digits beside text (a text column) keep their value: no error."""
    path = tmp_path / "qa.csv"
    path.write_text("prompt,big,id,code\na,12345678901234567890,9007199254740993,x\nb,1,2,123456789012345678901\n")
    rows = load_dataset(path=str(path), cache_dir=str(tmp_path / "c")).rows
    assert [r["big"] for r in rows] == [12345678901234567890, 1] and rows[0]["id"] == 9007199254740993
    assert rows[1]["code"] == "123456789012345678901"


def test_an_integer_past_pythons_digit_limit_beside_a_fraction_is_named(tmp_path):
    """On integ the rounded-integer check's int() of a 5000-digit cell raised ValueError ("Exceeds
    the limit (4300 digits) for integer string conversion") out of the load: a traceback, where
    pandas had read the cell as inf. The cell is named, shortened."""
    path = tmp_path / "qa.csv"
    path.write_text(f"prompt,answer\na,0.5\nb,{'9' * 5000}\n")
    with pytest.raises(ConfigError, match=r"qa.csv:3: column 'answer' holds the integer 9{40}\.\.\. \(5000 digits\), "
                                          r"which pandas .* reads as the number inf"):
        load_dataset(path=str(path), cache_dir=str(tmp_path / "c"))
