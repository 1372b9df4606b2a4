"""docs/trainers.md's verl commands are valid for verl 0.9.1: every override names a key of
verl's own reward config (from the published wheel), values with ``=`` are quoted for Hydra, and
the named reward function is what verl's reward loop calls, with the documented kwargs."""

from __future__ import annotations

import asyncio
import inspect
import re
import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml
from distrs_client.adapters import verl as verl_adapter

from tests.fixtures.service import TRAINER_A, Service
from tests.integration.compat.framework_sources import VERL, source

DOC = Path(__file__).resolve().parents[3] / "docs" / "trainers.md"


def verl_overrides() -> list[str]:
    blocks = re.findall(r"```bash\n(.*?)```", DOC.read_text(), re.DOTALL)
    out = []
    for block in blocks:
        if "verl.trainer.main_ppo" not in block:
            continue
        text = block.replace("\\\n", " ")
        text = re.sub(r'\$\(python -c "[^"]*"\)', "/site/distrs_client/adapters/verl.py", text)
        for word in shlex.split(text.replace("$DISTRS_TOKEN", "tok"), comments=True):
            if "=" in word and not word.startswith("-"):
                out.append(word)
    return out


@pytest.fixture(scope="module")
def reward_config() -> dict[str, Any]:
    return dict(yaml.safe_load(source(*VERL, "verl/trainer/config/reward/reward.yaml").read_text()))


def lookup(cfg: dict[str, Any], dotted: str) -> bool:
    node: Any = {"reward": cfg}
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return False
        node = node[part]
    return True


def test_documented_overrides_exist_in_verl_and_are_hydra_safe(reward_config: dict[str, Any]) -> None:
    overrides = verl_overrides()
    assert any(o.startswith("reward.sandbox_fusion.url=") for o in overrides)
    assert any(o.startswith("reward.custom_reward_function.name=") for o in overrides)
    for o in overrides:
        key, _, value = o.partition("=")
        assert "reward_manager=batch" not in o
        if key.startswith("+"):  # adds a key: its parent must exist
            assert lookup(reward_config, key[1:].rsplit(".", 2)[0]), o
        else:
            assert lookup(reward_config, key), f"{key} is not a verl 0.9.1 config key"
        if "=" in value:  # Hydra's grammar refuses a bare '=' in a value
            assert value[0] == value[-1] and value[0] in "'\"", f"unquoted '=' in {o}"


def test_named_function_is_a_coroutine_verls_loop_awaits() -> None:
    (name,) = [
        o.partition("=")[2] for o in verl_overrides() if o.startswith("reward.custom_reward_function.name=")
    ]
    assert inspect.iscoroutinefunction(getattr(verl_adapter, name))


def test_named_function_scores_with_the_documented_kwargs(compat_service: Service) -> None:
    kwargs = {
        o.partition("=")[0].rsplit(".", 1)[1]: o.partition("=")[2]
        for o in verl_overrides()
        if o.startswith("+reward.custom_reward_function.reward_kwargs.")
    }
    kwargs["distrs_url"] = compat_service.url
    kwargs["distrs_token"] = TRAINER_A

    async def one(text: str) -> float:
        return float(
            await verl_adapter.compute_score_async(
                data_source="openai/gsm8k", solution_str=text, ground_truth="72", extra_info={}, **kwargs
            )
        )

    assert asyncio.run(one("so \\boxed{72}")) == 1.0
    assert asyncio.run(one("so \\boxed{71}")) == 0.0


def test_documented_openrlhf_flags_exist_in_openrlhf() -> None:
    """Every ``--flag`` of the OpenRLHF command is one OpenRLHF 0.11.2's trainer parses."""
    from tests.integration.compat.framework_sources import OPENRLHF

    cli = source(*OPENRLHF, "openrlhf/cli/train_ppo_ray.py").read_text()
    blocks = [b for b in re.findall(r"```bash\n(.*?)```", DOC.read_text(), re.DOTALL) if "train_ppo_ray" in b]
    assert blocks
    flags = [w for b in blocks for w in shlex.split(b.replace("\\\n", " ")) if w.startswith("--")]
    assert "--reward.remote_url" in flags
    for flag in flags:
        assert f'"{flag}"' in cli, f"{flag} is not an OpenRLHF 0.11.2 option"
