"""Configuration: defaults, the example file, ${VAR} substitution, and one clear line per mistake."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.config import (
    Config,
    ConfigError,
    check_storage_writable,
    find_config_path,
    load_config,
    require_platforms,
)

EXAMPLE = Path(__file__).resolve().parents[2] / "deploy" / "config.example.yaml"
EXAMPLE_ENV = {"TELEGRAM_BOT_TOKEN": "123:tg-secret", "ANTHROPIC_API_KEY": "sk-ant-secret"}


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def error_of(tmp_path: Path, text: str, env: dict[str, str] | None = None) -> str:
    """Load `text` expecting a ConfigError; return its message, checked to be one line."""
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_config(path, env=env or {})
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(f"{path}: ")
    return message


# --- what loads ----------------------------------------------------------------------------


def test_defaults_without_a_file(tmp_path: Path) -> None:
    cfg = load_config(None, env={"THREADLINE_HOME": str(tmp_path)})
    assert cfg.model.provider == "local"
    assert cfg.model.name == "SmolLM2-135M-Instruct"
    assert cfg.model.context_length is None
    assert cfg.system_prompt == "You are Threadline, a helpful assistant."
    assert cfg.compression.threshold == 0.50 and cfg.compression.protect_last_n == 20
    assert cfg.gateway.session_reset.mode == "none" and cfg.gateway.coalesce_ms == 1500
    assert cfg.enabled_platforms() == ["console"]
    assert cfg.platforms.telegram.token is None
    assert cfg.db_path == tmp_path / "threadline.db"
    assert cfg.source is None
    assert Config().model_dump() == cfg.model_dump()


def test_empty_file_means_defaults(tmp_path: Path) -> None:
    cfg = load_config(write(tmp_path, "# nothing here yet\n"), env={})
    assert cfg.model == Config().model and cfg.enabled_platforms() == ["console"]


def test_example_file_loads_with_its_variables(tmp_path: Path) -> None:
    cfg = load_config(EXAMPLE, env=EXAMPLE_ENV)
    assert cfg.model.provider == "anthropic"
    assert cfg.model.api_key == "sk-ant-secret"
    assert cfg.platforms.telegram.token == "123:tg-secret"
    assert cfg.platforms.discord.token is None  # ${DISCORD_BOT_TOKEN} unset, discord disabled
    assert cfg.enabled_platforms() == ["telegram"]
    assert cfg.logging.level == "INFO"
    require_platforms(cfg)
    assert set(cfg.secret_values()) == {"123:tg-secret", "sk-ant-secret"}


def test_environment_substitution_and_default_form(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "model:\n"
        "  provider: openai\n"
        "  base_url: http://${LLM_HOST:-127.0.0.1}:${LLM_PORT:-11434}/v1\n"
        "  api_key: ${OPENAI_API_KEY}\n"
        "  max_retries: ${RETRIES:-5}\n"
        "system_prompt: 'cost: $${NOT_A_VAR}'\n"
        "logging: {level: '${LOG_LEVEL:-warning}'}\n",
    )
    cfg = load_config(path, env={"LLM_HOST": "gpu.lan", "OPENAI_API_KEY": "k: v # not yaml"})
    assert cfg.model.base_url == "http://gpu.lan:11434/v1"
    assert cfg.model.api_key == "k: v # not yaml"  # values never break the YAML
    assert cfg.model.max_retries == 5
    assert cfg.system_prompt == "cost: ${NOT_A_VAR}"
    assert cfg.logging.level == "WARNING"


def test_platform_token_defaults_to_its_environment_variable(tmp_path: Path) -> None:
    path = write(tmp_path, "platforms: {telegram: {enabled: true}}\n")
    cfg = load_config(path, env={"TELEGRAM_BOT_TOKEN": "123:abc"})
    assert cfg.platforms.telegram.token == "123:abc"


def test_user_ids_are_normalized_to_strings(tmp_path: Path) -> None:
    path = write(tmp_path, "gateway: {admins: {telegram: [12345, ' 678 '], discord: ['9']}}\n")
    cfg = load_config(path, env={})
    assert cfg.gateway.admins.telegram == ["12345", "678"]
    assert cfg.gateway.admins.discord == ["9"]


def test_system_prompt_file_is_read_relative_to_the_config(tmp_path: Path) -> None:
    (tmp_path / "prompt.md").write_text("Be brief.\n", encoding="utf-8")
    cfg = load_config(write(tmp_path, "system_prompt_file: prompt.md\n"), env={})
    assert cfg.system_prompt == "Be brief."
    assert cfg.system_prompt_file == tmp_path / "prompt.md"


def test_config_is_frozen() -> None:
    with pytest.raises(ValueError):
        Config().model.name = "other"  # type: ignore[misc]


# --- lookup order --------------------------------------------------------------------------


def test_lookup_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    home = tmp_path / "home"
    user_file = home / ".config" / "threadline" / "config.yaml"
    assert find_config_path(None, env={"HOME": str(home)}) is None
    user_file.parent.mkdir(parents=True)
    user_file.write_text("{}\n")
    assert find_config_path(None, env={"HOME": str(home)}) == user_file
    (tmp_path / "config.yaml").write_text("{}\n")
    assert find_config_path(None, env={"HOME": str(home)}) == Path("config.yaml")
    env = {"HOME": str(home), "THREADLINE_CONFIG": str(user_file)}
    assert find_config_path(None, env=env) == user_file
    assert find_config_path("config.yaml", env=env) == Path("config.yaml")


def test_explicit_missing_file_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="nope.yaml: config file not found"):
        find_config_path(str(tmp_path / "nope.yaml"), env={})
    with pytest.raises(ConfigError, match="THREADLINE_CONFIG"):
        find_config_path(None, env={"THREADLINE_CONFIG": str(tmp_path / "nope.yaml")})


# --- one clear line per mistake ------------------------------------------------------------


def test_bad_yaml_names_the_line(tmp_path: Path) -> None:
    message = error_of(tmp_path, "model:\n  name: x\n   provider: local\n")
    assert "line 3" in message and "invalid YAML" in message


def test_top_level_must_be_a_mapping(tmp_path: Path) -> None:
    assert "top level must be a mapping" in error_of(tmp_path, "- model\n- platforms\n")


def test_duplicate_key_is_an_error(tmp_path: Path) -> None:
    assert "duplicate key 'model'" in error_of(tmp_path, "model: {}\nmodel: {}\n")


def test_unknown_top_level_key_suggests_the_right_one(tmp_path: Path) -> None:
    message = error_of(tmp_path, "modle:\n  provider: local\n")
    assert message.endswith("unknown key 'modle' (did you mean 'model'?)")


def test_unknown_nested_key_names_its_section(tmp_path: Path) -> None:
    message = error_of(tmp_path, "compression:\n  treshold: 0.4\n")
    assert message.endswith("compression: unknown key 'treshold' (did you mean 'threshold'?)")


def test_wrong_type_names_key_and_value(tmp_path: Path) -> None:
    message = error_of(tmp_path, "model:\n  context_length: big\n")
    assert message.endswith("model.context_length: expected a positive integer, got 'big'")


def test_unset_variable_in_enabled_section(tmp_path: Path) -> None:
    text = "platforms:\n  discord: {enabled: true, token: '${MY_DISCORD_TOKEN}'}\n"
    message = error_of(tmp_path, text)
    assert "platforms.discord.token: environment variable MY_DISCORD_TOKEN is not set" in message


def test_unset_variable_in_disabled_platform_is_fine(tmp_path: Path) -> None:
    text = "platforms:\n  discord: {enabled: false, token: '${MY_DISCORD_TOKEN}'}\n"
    cfg = load_config(write(tmp_path, text), env={})
    assert cfg.platforms.discord.token is None
    assert cfg.enabled_platforms() == ["console"]


def test_unknown_provider(tmp_path: Path) -> None:
    message = error_of(tmp_path, "model: {provider: ollama}\n")
    assert "model.provider: expected 'local', 'openai' or 'anthropic', got 'ollama'" in message


def test_unwritable_storage_path(tmp_path: Path) -> None:
    # /proc refuses new directories even for root, where permission bits would not.
    cfg = load_config(write(tmp_path, "storage: {path: /proc/threadline-test/t.db}\n"), env={})
    with pytest.raises(ConfigError) as info:
        check_storage_writable(cfg)
    message = str(info.value)
    assert "\n" not in message
    assert "storage.path: cannot write /proc/threadline-test/t.db" in message


def test_writable_storage_path_is_created(tmp_path: Path) -> None:
    cfg = load_config(write(tmp_path, "storage: {path: data/threadline.db}\n"), env={})
    check_storage_writable(cfg)
    assert cfg.db_path == tmp_path / "data" / "threadline.db"
    assert (tmp_path / "data").is_dir()


def test_threshold_out_of_range(tmp_path: Path) -> None:
    message = error_of(tmp_path, "compression: {threshold: 1.5}\n")
    assert message.endswith("compression.threshold: expected a number from 0.0 to 1.0, got 1.5")


def test_bad_timezone(tmp_path: Path) -> None:
    message = error_of(tmp_path, "gateway:\n  session_reset: {mode: daily, timezone: Mars/Base}\n")
    assert "gateway.session_reset.timezone: unknown time zone 'Mars/Base'" in message


def test_enabled_telegram_without_token(tmp_path: Path) -> None:
    message = error_of(tmp_path, "platforms:\n  telegram: {enabled: true, token: ''}\n")
    assert "platforms.telegram.token: required when telegram is enabled" in message


def test_webhook_without_secret(tmp_path: Path) -> None:
    text = (
        "platforms:\n  telegram:\n    enabled: true\n    token: '123:abc'\n    mode: webhook\n"
        "    webhook: {url: 'https://bot.example.org/tg'}\n"
    )
    message = error_of(tmp_path, text)
    assert "platforms.telegram.webhook.secret_token: required when mode is webhook" in message


def test_anthropic_needs_an_api_key(tmp_path: Path) -> None:
    message = error_of(tmp_path, "model: {provider: anthropic, name: claude}\n")
    assert "model.api_key: provider anthropic needs an API key" in message


def test_prompt_and_prompt_file_together(tmp_path: Path) -> None:
    message = error_of(tmp_path, "system_prompt: hi\nsystem_prompt_file: p.md\n")
    assert "system_prompt_file: use either system_prompt or system_prompt_file" in message


def test_missing_prompt_file(tmp_path: Path) -> None:
    message = error_of(tmp_path, "system_prompt_file: missing.md\n")
    assert "system_prompt_file: cannot read" in message and "missing.md" in message


def test_secrets_from_the_environment_are_never_echoed(tmp_path: Path) -> None:
    text = "platforms:\n  telegram:\n    webhook: {port: '${TELEGRAM_BOT_TOKEN}'}\n"
    message = error_of(tmp_path, text, env={"TELEGRAM_BOT_TOKEN": "123:very-secret"})
    assert "platforms.telegram.webhook.port" in message and "$TELEGRAM_BOT_TOKEN" in message
    assert "very-secret" not in message


def test_prices_by_model_with_cache_prices_optional(tmp_path: Path) -> None:
    text = ("prices:\n"
            "  claude-sonnet-4-5: {input: 3, output: 15, cache_read: 0.3, cache_write: 3.75}\n"
            "  gpt-4.1-mini: {input: 0.40, output: 1.60}\n")
    prices = load_config(write(tmp_path, text), env={}).prices
    assert prices["claude-sonnet-4-5"].cache_write == 3.75
    mini = prices["gpt-4.1-mini"]
    # Left out, not guessed here: gateway/turns/pricing.py applies the default ratios.
    assert (mini.input, mini.output, mini.cache_read, mini.cache_write) == (0.4, 1.6, None, None)
    assert load_config(write(tmp_path, "prices:\n"), env={}).prices == {}
    assert load_config(EXAMPLE, env=EXAMPLE_ENV).prices == {}


@pytest.mark.parametrize(("entry", "expected"), [
    ("{input: -1, output: 2}", "prices.m.input: expected a number >= 0 (USD per million tokens)"),
    ("{input: 1, output: .inf}", "prices.m.output: expected a number >= 0"),
    ("{input: true, output: 2}", "prices.m.input: expected a number >= 0 (USD per million "
                                 "tokens), got true"),
    ("{input: cheap, output: 2}", "prices.m.input: expected a number, got 'cheap'"),
    ("{input: 1}", "prices.m.output: is required"),
    ("{input: 1, ouput: 2}", "prices.m: unknown key 'ouput' (did you mean 'output'?)"),
    ("3", "prices.m: expected a mapping of keys, got 3"),
], ids=["negative", "infinite", "bool", "text", "missing-output", "typo", "not-a-mapping"])
def test_a_bad_price_is_one_line_naming_model_and_key(tmp_path: Path, entry: str,
                                                       expected: str) -> None:
    assert expected in error_of(tmp_path, f"prices:\n  m: {entry}\n")


def test_run_needs_a_platform(tmp_path: Path) -> None:
    cfg = load_config(write(tmp_path, "platforms: {console: {enabled: false}}\n"), env={})
    with pytest.raises(ConfigError, match=r"config.yaml: platforms: no platform is enabled"):
        require_platforms(cfg)


def test_storage_url_takes_postgresql_only_and_its_password_is_a_secret(tmp_path: Path) -> None:
    message = error_of(tmp_path, "storage:\n  url: mysql://u:p@db/x\n")
    assert "storage.url" in message and "postgresql://" in message
    text = "storage:\n  url: postgresql://tl:${DB_PASSWORD}@db.internal:5432/threadline\n"
    config = load_config(write(tmp_path, text), env={"DB_PASSWORD": "s3cr3t-pw"})
    assert config.storage.url == "postgresql://tl:s3cr3t-pw@db.internal:5432/threadline"
    assert "s3cr3t-pw" in config.secret_values()  # masked in every log line


def test_discord_shard_ids_need_a_count_and_must_fit_in_it(tmp_path: Path) -> None:
    base = "platforms:\n  discord:\n    token: x\n"
    assert "shard_count" in error_of(tmp_path, base + "    shard_ids: [0]\n")
    message = error_of(tmp_path, base + "    shard_count: 2\n    shard_ids: [0, 2]\n")
    assert "platforms.discord.shard_ids" in message and "0 to 1" in message
    config = load_config(write(tmp_path, base + "    shard_count: 4\n    shard_ids: [1, 3]\n"),
                         env={})
    assert (config.platforms.discord.shard_count, config.platforms.discord.shard_ids) == (4, [1, 3])
