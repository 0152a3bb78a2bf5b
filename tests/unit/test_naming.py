"""Run and object names: DNS-1123, short enough for every derived name, unique, validated."""

from __future__ import annotations

import re

import pytest

from cw_cli.errors import ConfigError
from cw_cli.labels import object_names
from cw_cli.render.naming import MAX_RUN_NAME, generate_run_name, sanitize, validate_run_name

DNS_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")


@pytest.mark.parametrize(
    "framework,type_name,stem",
    [("trl", "sft", "trl-sft"), ("axolotl", "grpo", ""), ("verifiers", "rlhf", "My Config_v2!!"), ("trl", "dpo", "123-Ünïcode--stem")],
)
def test_generated_names_are_dns_labels_of_at_most_40_chars(framework, type_name, stem):
    for _ in range(20):
        name = generate_run_name(framework, type_name, stem)
        assert DNS_LABEL.match(name), name
        assert len(name) <= MAX_RUN_NAME == 40


def test_generated_names_are_unique_across_calls():
    names = {generate_run_name("trl", "sft", "trl-sft") for _ in range(500)}
    # 36^5 suffixes: one repeat in 500 draws happens once in ~500 runs (it did, in this suite),
    # two once in ~500,000; a name that is not random repeats hundreds of times.
    assert len(names) >= 499


def test_generated_name_drops_repeated_words_of_the_stem():
    name = generate_run_name("trl", "sft", "trl-sft")
    assert re.fullmatch(r"trl-sft-[a-z0-9]{5}", name), name


@pytest.mark.parametrize("stem", ["x" * 200, "a-" * 100, "long-config-name-" * 10 + "end", "-" * 80])
def test_very_long_config_stems_are_truncated_keeping_the_random_suffix(stem):
    names = {generate_run_name("axolotl", "grpo", stem) for _ in range(50)}
    assert len(names) == 50
    for name in names:
        assert len(name) <= MAX_RUN_NAME and DNS_LABEL.match(name), name
        assert name.startswith("axolotl-grpo")
        assert "--" not in name


# Ids fixed: a generated name is random, and xdist's workers must collect the same test ids.
@pytest.mark.parametrize("run", [generate_run_name("verifiers", "grpo", "z" * 100), "a" * 40], ids=["generated", "given"])
def test_every_object_and_pod_name_fits_in_63_chars(run):
    names = object_names(run)
    assert set(names) == {"config", "trainer", "nodes", "server", "reward", "keeper", "network"}
    for role, name in names.items():
        assert name == f"{run}-{role}"
        assert len(name) <= 63 and DNS_LABEL.match(name)
    # Pods of an Indexed Job (up to 512 nodes) get "-<index>-<5 chars>"; their hostname
    # "<job>-<index>" must be a DNS label, and so must the job-name label value.
    assert len(f"{names['trainer']}-511-abcde") <= 63
    # Pod DNS name of a multi-node trainer: <trainer>-<index>.<nodes>, each label <= 63.
    assert all(len(label) <= 63 for label in f"{names['trainer']}-511.{names['nodes']}".split("."))


@pytest.mark.parametrize("name", ["golden-run", "a", "run-1", "a" * 40, "x1-y2-z3"])
def test_valid_names_are_accepted_unchanged(name):
    assert validate_run_name(name) == name


@pytest.mark.parametrize(
    "name",
    ["My_Run", "run.1", "1run", "-run", "run-", "run name", "ünï", "a" * 41, "Run_" + "x" * 60, "---", "", "run\n-kind: Secret"],
)
def test_bad_names_are_refused_with_a_valid_suggestion(name):
    with pytest.raises(ConfigError) as info:
        validate_run_name(name)
    error = info.value
    assert "--name" in error.message and "40" in error.message
    assert error.hint and error.hint.startswith("try --name ")
    suggestion = error.hint.removeprefix("try --name ")
    assert DNS_LABEL.match(suggestion) and len(suggestion) <= MAX_RUN_NAME
    validate_run_name(suggestion)


def test_suggestion_keeps_the_recognisable_part():
    with pytest.raises(ConfigError) as info:
        validate_run_name("My_Experiment.v2")
    assert info.value.hint == "try --name my-experiment-v2"


@pytest.mark.parametrize("text", ["", "!!!", "123", "ÄÖÜ", "___"])
def test_sanitize_always_returns_a_name_starting_with_a_letter(text):
    assert DNS_LABEL.match(sanitize(text))
