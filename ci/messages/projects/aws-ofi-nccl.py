"""aws-ofi-nccl, the libfabric network plugin of NCCL. Its macros paste "NET/OFI " before the
format (include/nccl_ofi_log.h) and hand it to NCCL's logger, so a line reads
`host:pid:tid [dev] NCCL WARN NET/OFI <text>`: the stored format starts with that prefix.
Tags: the newest release of each pair of minors from v1.7 on."""

import re

KEEP = {"v1.7.4-aws", "v1.9.2-aws", "v1.11.1-aws", "v1.13.2-aws", "v1.15.0", "v1.17.3",
        "v1.19.2", "v1.21.1"}

CONFIG = {
    "url": "https://github.com/aws/aws-ofi-nccl",
    "tags": lambda t: t in KEEP,
    "trees": ["src/", "include/"],
    "macros": {
        "NCCL_OFI_WARN": ("WARN", 0, None, "NET/OFI "),
        "NCCL_OFI_INFO": ("INFO", 1, 0, "NET/OFI "),
    },
    # Older releases return NCCL's codes, newer ones negative errno / libfabric codes.
    "returns": r"(?:return|ret\s*=|rc\s*=)\s*\(?\s*(nccl[A-Z]\w*|-(?:FI_)?E[A-Z0-9]+\b|-errno)",
}
