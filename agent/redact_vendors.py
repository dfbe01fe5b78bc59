"""Keys known by their shape: vendor prefixes, webhook URLs, signed URLs, and the command
and file forms that carry a password (`curl -u`, `.netrc`, XML settings).

Each entry is a `Rule` led by a literal (a fast prefix scan) whose runs are possessive or
bounded, so it reads a text in linear time, and whose screen (an RE2 condition, see
`agent/redact_screen.py`) is its literal or a superset of its start. Classes are ASCII
(`[0-9]`, never `\\d`, which Python widens to every script's digits and RE2 does not).
"""

from __future__ import annotations

import base64
import binascii
import re

from agent.redact_placeholders import machine_made, placeholder
from agent.redact_rule import WORD, Rule, vendor
from agent.redact_values import REDACTED

_T = "[A-Za-z0-9_-]"  # a token character
_NO_TAIL = "(?![A-Za-z0-9])"  # a fixed-length key ends there


def _pem_in_base64(match: re.Match[str]) -> str:
    # A base64 PEM (kubeconfig `client-key-data`, a Helm value): only a private key is a
    # secret; a certificate in the same shape is not.
    head = match.group(0)[:64]
    try:
        decoded = base64.b64decode(head[: len(head) // 4 * 4])
    except (binascii.Error, ValueError):
        return match.group(0)
    return REDACTED if b"PRIVATE KEY" in decoded else match.group(0)


def _token_userinfo(match: re.Match[str]) -> str:
    # `https://<token>@host`: a generated user name is a token (GitHub, Sentry DSNs); a
    # person's (`https://deploy@host`) is not.
    name = match.group(0)[len(match[1]):]
    return match[1] + REDACTED if machine_made(name) and not placeholder(name) \
        else match.group(0)


def _curl_user(match: re.Match[str]) -> str:
    # `-u user:password` is curl's; elsewhere `-u 1000:1000` is a uid and gid.
    text, start = match.string, match.start()
    line = text.rfind("\n", max(0, start - 300), start) + 1  # bounded: one long line is linear
    secret = match[2]
    if text.rfind("curl", max(line, start - 300), start) < 0 or placeholder(secret) \
            or secret.isdigit():
        return match.group(0)
    return match.group(0)[:match.start(2) - start] + REDACTED


def _tag_value(match: re.Match[str]) -> str:
    return match.group(0) if placeholder(match[2].strip()) else match[1] + REDACTED


def _after_prefix(match: re.Match[str]) -> str:
    """Keep group 1 and replace the rest, unless the rest is a placeholder."""
    return match.group(0) if placeholder(match.group(0)[len(match[1]):]) \
        else match[1] + REDACTED


_SECRET_TAGS = ("password", "passwd", "passphrase", "secret", "token", "apikey", "api_key",
                "api-key", "accesskey", "access_key", "secretkey", "secret_key",
                "client_secret", "privatekey", "private_key", "auth_token", "access_token")

VENDOR_RULES: tuple[Rule, ...] = (
    # AI providers. `sk-` covers OpenAI (sk-proj-), Anthropic (sk-ant-api03-,
    # sk-ant-admin01-), OpenRouter (sk-or-v1-) and DeepSeek; hyphens and underscores belong
    # to the key, so no tail survives.
    vendor(rf"sk-{_T}{{20,}}+", "sk-", screen="sk-"),
    vendor(r"gsk_[A-Za-z0-9]{40,}+", "gsk_", screen="gsk_"),  # Groq
    vendor(r"xai-[A-Za-z0-9]{40,}+", "xai-", screen="xai-"),  # xAI
    vendor(r"r8_[A-Za-z0-9]{30,}+", "r8_", screen="r8_"),  # Replicate
    vendor(r"pplx-[A-Za-z0-9]{40,}+", "pplx-", screen="pplx-"),  # Perplexity
    vendor(r"hf_[A-Za-z0-9]{30,}+", "hf_", screen="hf_"),  # Hugging Face
    vendor(r"api_org_[A-Za-z0-9]{30,}+", "api_org_", screen="api_org_"),
    # Code hosting, packages, containers.
    vendor(r"gh[pousr]_[A-Za-z0-9]{20,}+", "gh", screen="gh[pousr]_"),
    vendor(r"github_pat_[A-Za-z0-9_]{20,}+", "github_pat_", screen="github_pat_"),
    vendor(rf"gl(?:pat|dt|rt|ptt|cbt|ft|imt|soat|agent)-{_T}{{20,}}+", "gl",
           screen="gl(?:pat|dt|rt|ptt|cbt|ft|imt|soat|agent)-"),
    vendor(r"npm_[A-Za-z0-9]{30,}+", "npm_", screen="npm_"),
    vendor(rf"pypi-AgE{_T}{{40,}}+", "pypi-AgE", screen="pypi-AgE"),
    vendor(rf"dckr_pat_{_T}{{20,}}+", "dckr_pat_", screen="dckr_pat_"),  # Docker Hub
    # Chat and mail.
    vendor(r"x(?:ox[abposre]|app)-[A-Za-z0-9-]{10,}+", "xox", "xapp-",
           screen="x(?:ox[abposre]|app)-"),  # Slack
    vendor(r"(hooks\.slack\.com/(?:services|workflows|triggers)/)[A-Za-z0-9_/-]{16,}+",
           "hooks.slack.com/", screen=r"hooks\.slack\.com/", keep=True),
    # Discord webhooks and interaction callbacks (each token answers as the bot).
    vendor(r"(/(?:webhooks|interactions)/[0-9]{5,}+/)[A-Za-z0-9._-]{16,}+", "/webhooks/",
           "/interactions/", screen="/(?:webhooks|interactions)/[0-9]", keep=True,
           inside=True),
    vendor(r"(\.webhook\.office\.com/webhookb2/)[A-Za-z0-9@/_-]{20,}+", ".webhook.office.com/",
           screen=r"\.webhook\.office\.com/", keep=True, inside=True),  # Microsoft Teams
    vendor(rf"SG\.{_T}{{16,}}+\.{_T}{{16,}}+", "SG.", screen=r"SG\."),  # SendGrid
    vendor(rf"SK[0-9a-fA-F]{{32}}{_NO_TAIL}", "SK", screen="SK[0-9a-fA-F]{32}"),  # Twilio
    vendor(rf"key-[0-9a-f]{{32}}{_NO_TAIL}", "key-", screen="key-[0-9a-f]{32}"),  # Mailgun
    vendor(rf"[0-9a-f]{{32}}-us[0-9]{{1,2}}{_NO_TAIL}", "-us", screen="-us[0-9]",
           quick="-us[0-9]"),  # Mailchimp
    # Cloud.
    vendor(rf"A[KS]IA[A-Z0-9]{{16}}{_NO_TAIL}", "AKIA", "ASIA", screen="A[KS]IA"),  # AWS
    vendor(rf"AIza{_T}{{35}}", "AIza", screen="AIza"),  # Google API key
    vendor(rf"GOCSPX-{_T}{{20,}}+", "GOCSPX-", screen="GOCSPX-"),  # Google OAuth secret
    vendor(rf"ya29\.{_T}{{20,}}+", "ya29.", screen=r"ya29\."),  # Google access token
    vendor(rf"1//0{_T}{{30,}}+", "1//0", screen="1//0"),  # Google refresh token
    # Azure AD client secrets: three characters, a digit, `Q~`, then 31 to 34.
    vendor(r"[A-Za-z0-9_~.-]{3}[0-9]Q~[A-Za-z0-9_~.-]{31,34}(?![A-Za-z0-9_~.-])", "Q~",
           screen="[0-9]Q~", quick="[0-9]Q~"),
    # Signed URLs: Azure SAS `sig=`, AWS and Google `X-*-Signature=`.
    vendor(r"([?&](?:sig|[Xx]-(?:Amz|Goog)-Signature)=)[A-Za-z0-9%+/=]{16,}+", "sig=",
           "Signature=", screen=r"[?&](?:sig|[Xx]-(?:Amz|Goog)-Signature)=", keep=True,
           inside=True),
    vendor(r"do[opr]_v1_[a-f0-9]{64}", "_v1_", screen="do[opr]_v1_"),  # DigitalOcean
    vendor(r"dapi[a-f0-9]{32}(?:-[0-9]+)?", "dapi", screen="dapi[a-f0-9]{32}"),  # Databricks
    vendor(rf"HRKU-{_T}{{30,}}+", "HRKU-", screen="HRKU-"),  # Heroku
    vendor(r"pul-[a-f0-9]{40}", "pul-", screen="pul-"),  # Pulumi
    vendor(r"dp\.(?:pt|st|ct|sa|scim|audit)\.[A-Za-z0-9._-]{20,}+", "dp.",
           screen=r"dp\.(?:pt|st|ct|sa|scim|audit)\."),  # Doppler
    vendor(rf"hv[sbr]\.{_T}{{20,}}+", "hvs.", "hvb.", "hvr.", screen=r"hv[sbr]\."),  # Vault
    vendor(rf"(\.atlasv1\.){_T}{{40,}}+", ".atlasv1.", screen=r"\.atlasv1\.", keep=True,
           inside=True),  # Terraform Cloud (the id before it is not secret)
    vendor(r"sbp_[a-f0-9]{40}", "sbp_", screen="sbp_"),  # Supabase
    vendor(rf"sb_secret_{_T}{{20,}}+", "sb_secret_", screen="sb_secret_"),
    vendor(r"nfp_[A-Za-z0-9]{30,}+", "nfp_", screen="nfp_"),  # Netlify
    vendor(rf"figd_{_T}{{30,}}+", "figd_", screen="figd_"),  # Figma
    # Work tools.
    vendor(r"AT[AC]TT3[A-Za-z0-9_=-]{30,}+", "TT3", screen="AT[AC]TT3"),  # Atlassian
    vendor(r"lin_(?:api|oauth)_[A-Za-z0-9]{32,}+", "lin_", screen="lin_(?:api|oauth)_"),
    vendor(r"(?:secret|ntn)_[A-Za-z0-9]{40,}+", "secret_", "ntn_",
           screen="(?:secret|ntn)_[A-Za-z0-9]{40}"),  # Notion
    vendor(r"PMAK-[A-Fa-f0-9]{24}-[A-Fa-f0-9]{34}", "PMAK-", screen="PMAK-"),  # Postman
    vendor(r"pat[A-Za-z0-9]{14}\.[a-f0-9]{64}", "pat", screen=r"pat[A-Za-z0-9]{14}\.[a-f0-9]{16}",
           quick=r"\.[a-f0-9]{64}"),  # Airtable
    # Observability.
    vendor(r"glsa_[A-Za-z0-9]{32}_[A-Fa-f0-9]{8}", "glsa_", screen="glsa_"),  # Grafana
    vendor(r"glc_[A-Za-z0-9+/=]{32,}+", "glc_", screen="glc_"),  # Grafana Cloud
    vendor(r"NR(?:AK|AA|II|JS|RA|SP)-[A-Za-z0-9]{20,}+", "NR",
           screen="NR(?:AK|AA|II|JS|RA|SP)-"),  # New Relic
    vendor(r"sntry[su]_[A-Za-z0-9+/=_]{40,}+", "sntry", screen="sntry[su]_"),  # Sentry
    # Payments and commerce.
    vendor(r"[rs]k_(?:live|test)_[A-Za-z0-9]{16,}+", "k_",
           screen="[rs]k_(?:live|test)_"),  # Stripe secret and restricted keys
    vendor(r"whsec_[A-Za-z0-9+/=]{24,}+", "whsec_", screen="whsec_"),  # Stripe webhooks
    vendor(rf"EAAA{_T}{{40,}}+", "EAAA", screen="EAAA"),  # Square access token
    vendor(rf"sq0(?:atp|csp|idp)-{_T}{{22,}}+", "sq0", screen="sq0(?:atp|csp|idp)-"),
    vendor(r"shp(?:at|ss|ca|pa)_[a-fA-F0-9]{32}", "shp", screen="shp(?:at|ss|ca|pa)_"),
    # Keys of tools.
    vendor(r"AGE-SECRET-KEY-1[0-9A-Z]{50,}+", "AGE-SECRET-KEY-", screen="AGE-SECRET-KEY-"),
    Rule(r"LS0tLS1CRUdJTi[A-Za-z0-9+/=]{20,}+", _pem_in_base64, ("LS0tLS1CRUdJTi",),
         screen="LS0tLS1CRUdJTi", not_after=WORD),
    # Credentials in URLs and command lines. `https://<token>@host` (the user:password
    # form is in agent.redact).
    Rule(r"(://)[A-Za-z0-9_.~%-]{16,}+(?=@)", _token_userinfo, ("://",),
         screen=r"://[A-Za-z0-9_.~%-]{16}"),
    Rule(r"-(?:u[ \t]*+|-user[ \t=]++)(?:(['\"]?[^\s:'\"]++:)([^\s'\"]++)"
         r"|(?P<skip>[^\s:'\"]*+))", _curl_user, ("-u",),
         screen="-(?:u|-user)[ \t=]*['\"]?[^\\s:'\"]+:", not_after=WORD),
    # .netrc: `machine host login me password secret`, on one line or several.
    Rule(r"(machine[ \t]++\S++[ \t\r\n]++login[ \t\r\n]++\S++[ \t\r\n]++password"
         r"[ \t\r\n]++)\S++", _after_prefix, ("password",),
         screen=r"login[ \t\r\n]+\S+[ \t\r\n]+password[ \t\r\n]", not_after=WORD),
    # XML settings (Maven, NuGet, .NET): `<password>secret</password>`.
    Rule(rf"(?i)(<(?:{'|'.join(_SECRET_TAGS)})>)([^<]{{1,200}}+)(?=</)", _tag_value,
         tuple(f"{tag}>" for tag in ("password", "passwd", "passphrase", "secret", "token",
                                     "key")),
         screen=rf"(?i)<(?:{'|'.join(_SECRET_TAGS)})>", lowered=True),
)
