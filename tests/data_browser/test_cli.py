"""The browser's command line and YAML config."""

import draccus

from data_browser.__main__ import _roots_to_list
from data_browser.config import BrowserConfig


def test_repeated_root_flags_and_yaml_config(tmp_path):
    config = draccus.parse(
        BrowserConfig, args=_roots_to_list(["--root", "./local_store", "--root=gs://b/p", "--port", "5055"])
    )
    assert config.roots == ["./local_store", "gs://b/p"] and config.port == 5055
    yaml = tmp_path / "browser.yaml"
    yaml.write_text("roots: [s3://bucket/lab]\nport: 6000\nrecords_per_page: 20\nmax_line_bytes: 4096\n")
    config = draccus.parse(BrowserConfig, config_path=str(yaml), args=[])
    assert config.roots == ["s3://bucket/lab"] and config.records_per_page == 20 and config.max_line_bytes == 4096
    assert config.normalized_roots() == ["s3://bucket/lab"]
