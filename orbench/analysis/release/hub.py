"""Publishing a release folder as a Hugging Face dataset repo (``orbench-release --push_to_hub``).

``check_token`` runs before anything is built or sent: it finds the token the way
``huggingface_hub`` does (``HF_TOKEN``, else the login saved by ``hf auth login``) and asks the
Hub whose it is (``whoami``). A missing token, one the Hub rejects and a read-only one stop the
command (``UsageError``: one line naming ``HF_TOKEN``, exit 2) before any upload. ``push`` then
creates the dataset repo if it is not there (``HfApi.create_repo``, ``--private`` applying only
to a repo it creates) and uploads the release's own files in one commit (``upload_folder`` with
those files as its allow-list: nothing else in the folder goes up). The Hub is
``huggingface_hub``'s endpoint: ``HF_ENDPOINT`` points it elsewhere (a mirror, a test server).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

from orbench.llm.errors import UsageError

logger = logging.getLogger(__name__)

TOKEN_HELP = ("set HF_TOKEN to a token with write access (huggingface.co/settings/tokens), or log in with "
              "'hf auth login'")


class PushError(Exception):
    """The upload failed after the release was built (network, server): rerun to push again."""


def _hub():
    try:
        import huggingface_hub
    except ImportError:
        raise UsageError("--push_to_hub needs huggingface_hub: pip install 'orbench[hub]'") from None
    return huggingface_hub


def _status(exc) -> int | None:
    response = getattr(exc, "response", None)
    return getattr(response, "status_code", None)


def _first_line(exc) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def check_repo_id(repo_id: str) -> None:
    """``UsageError`` when ``repo_id`` is not a Hub repo name (``name`` or ``owner/name``)."""
    _hub()
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    try:
        validate_repo_id(repo_id)
    except HFValidationError as exc:
        raise UsageError(f"--push_to_hub {repo_id!r} is not a repo id: {_first_line(exc)}") from None


def check_token() -> tuple[str, str]:
    """The token and the account it belongs to; ``UsageError`` (naming HF_TOKEN) when there is no
    token, the Hub rejects it or it may only read."""
    hub = _hub()
    from huggingface_hub import constants
    from huggingface_hub.utils import HfHubHTTPError

    if constants.HF_HUB_OFFLINE:
        raise UsageError("--push_to_hub: HF_HUB_OFFLINE is set, so huggingface_hub sends nothing; unset it to push")
    try:
        token = hub.get_token()
    except Exception as exc:  # noqa: BLE001 - e.g. a failed OIDC exchange (HF_OIDC_RESOURCE set): one line, the rest logged
        logger.debug("no Hugging Face token", exc_info=exc)
        raise UsageError(f"--push_to_hub: no usable Hugging Face token ({_first_line(exc)}): {TOKEN_HELP}") from None
    if not token:
        raise UsageError(f"--push_to_hub: no Hugging Face token found: {TOKEN_HELP}")
    api = hub.HfApi(token=token)
    try:
        who = api.whoami()
    except HfHubHTTPError as exc:
        status = _status(exc)
        if status in (401, 403):
            raise UsageError(f"--push_to_hub: the Hub at {api.endpoint} rejected the token (HTTP {status}): "
                             f"{TOKEN_HELP}") from None
        raise UsageError(f"--push_to_hub: could not check the token at {api.endpoint}: {_first_line(exc)}") from None
    except Exception as exc:  # noqa: BLE001 - no connection, DNS, TLS: the client's own errors, one line, the rest logged
        logger.debug("the Hub did not answer", exc_info=exc)
        raise UsageError(f"--push_to_hub: could not reach the Hub at {api.endpoint} to check the token "
                         f"({type(exc).__name__}: {_first_line(exc)}); check the network or HF_ENDPOINT") from None
    role = ((who.get("auth") or {}).get("accessToken") or {}).get("role")
    if role == "read":
        raise UsageError(f"--push_to_hub: the token of {who.get('name')} is read-only: {TOKEN_HELP}")
    return token, str(who.get("name") or "")


def push(folder: str | Path, repo_id: str, files: Sequence[str], *, token: str, private: bool,
         message: str) -> tuple[str, str]:
    """Create the dataset repo if needed and upload ``files`` (names in ``folder``) in one commit;
    returns (the repo's URL, the commit's URL). ``UsageError`` when the Hub refuses the token
    for this repo (401/403), ``PushError`` on any other failure."""
    hub = _hub()
    from huggingface_hub.utils import HfHubHTTPError

    api = hub.HfApi(token=token)
    try:
        url = api.create_repo(repo_id, repo_type="dataset", private=True if private else None, exist_ok=True)
        info = api.upload_folder(repo_id=url.repo_id, folder_path=str(folder), repo_type="dataset",
                                 allow_patterns=list(files), commit_message=message)
    except HfHubHTTPError as exc:
        status = _status(exc)
        if status in (401, 403):
            raise UsageError(f"--push_to_hub {repo_id}: the Hub refused the token (HTTP {status}: "
                             f"{_first_line(exc)}); {TOKEN_HELP}, for a namespace you may write to") from None
        raise PushError(f"upload to {repo_id} failed: {_first_line(exc)}") from None
    except Exception as exc:  # noqa: BLE001 - no connection, a malformed reply: the client's own errors, one line, the rest logged
        logger.debug("the upload to %s failed", repo_id, exc_info=exc)
        raise PushError(f"upload to {repo_id} failed ({type(exc).__name__}: {_first_line(exc)})") from None
    return str(url), str(getattr(info, "commit_url", "") or "")
