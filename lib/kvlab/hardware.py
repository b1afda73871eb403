"""Accelerator and network figures, each with its source.

Link figures are kept as the vendors quote them: NVLink and PCIe headline numbers count both
directions together, so one direction gets half (``one_way``). All bandwidths are decimal bytes per
second (1 GB/s = 1e9 B/s); memory sizes are decimal bytes as the vendors print them.
"""

from __future__ import annotations

from dataclasses import dataclass

GB = 1e9
TB = 1e12
TFLOPS = 1e12


@dataclass(frozen=True)
class GPU:
    """One accelerator. ``*_bidir_bytes_per_s`` are the vendor's both-directions figures."""

    name: str
    hbm_bytes: float
    hbm_bytes_per_s: float
    nvlink_bidir_bytes_per_s: float | None
    pcie_bidir_bytes_per_s: float
    dense_fp16_flops: float
    source: str
    #: The link between this GPU and its host's memory, where it is not PCIe (a Grace Hopper
    #: superchip's NVLink-C2C): its both-directions figure and its name; None: PCIe.
    host_link_bidir_bytes_per_s: float | None = None
    host_link: str = "PCIe"

    @property
    def host_one_way_bytes_per_s(self) -> float:
        """One direction of the link host<->GPU copies take: PCIe, or the host link."""
        bidir = self.host_link_bidir_bytes_per_s or self.pcie_bidir_bytes_per_s
        return one_way(bidir)

    @property
    def nvlink_one_way_bytes_per_s(self) -> float | None:
        return (
            None
            if self.nvlink_bidir_bytes_per_s is None
            else one_way(self.nvlink_bidir_bytes_per_s)
        )

    @property
    def pcie_one_way_bytes_per_s(self) -> float:
        return one_way(self.pcie_bidir_bytes_per_s)

    @property
    def ridge_flops_per_byte(self) -> float:
        """FLOPs the GPU can do per byte of HBM traffic: above this a kernel is compute-bound."""
        return self.dense_fp16_flops / self.hbm_bytes_per_s


def one_way(bidirectional_bytes_per_s: float) -> float:
    """One direction of a link whose headline figure counts both directions."""
    return bidirectional_bytes_per_s / 2


_H100_PAGE = (
    "NVIDIA H100 Tensor Core GPU product page and datasheet (nvidia.com/en-us/data-center/h100)"
)
_A100_PAGE = "NVIDIA A100 datasheet (nvidia.com/en-us/data-center/a100)"

H100_SXM = GPU("H100 SXM", 80 * GB, 3.35 * TB, 900 * GB, 128 * GB, 989 * TFLOPS, _H100_PAGE)
#: H100 PCIe: HBM2e, an NVLink bridge between pairs of cards only (600 GB/s), 1,513 TFLOPS fp16
#: with sparsity, so about 756 dense.
H100_PCIE = GPU("H100 PCIe", 80 * GB, 2.0 * TB, 600 * GB, 128 * GB, 756 * TFLOPS, _H100_PAGE)
H100_NVL = GPU("H100 NVL", 94 * GB, 3.9 * TB, 600 * GB, 128 * GB, 835 * TFLOPS, _H100_PAGE)
H200 = GPU(
    "H200",
    141 * GB,
    4.8 * TB,
    900 * GB,
    128 * GB,
    989 * TFLOPS,
    "NVIDIA H200 product page (nvidia.com/en-us/data-center/h200)",
)
#: Grace Hopper: an H100-class GPU and a Grace CPU on one module, joined by NVLink-C2C (900 GB/s
#: both ways, seven times PCIe Gen5 x16), so host<->GPU copies are not PCIe copies. GH200 with
#: 96 GB of HBM3 at 4 TB/s (the "480GB" module, with 480 GB of LPDDR5X), or 144 GB of HBM3e at
#: 4.9 TB/s; 989 TFLOPS dense fp16 (1,979 with sparsity), as the H100 SXM; NVLink 4 to other
#: GPUs; PCIe Gen5 x16 links for the NICs. Not in :data:`GPUS` (the book's table of the GPUs its
#: chapters use): :func:`find_gpu` names it so that a recording made on one is compared with its
#: own links.
_GH200_PAGE = (
    "NVIDIA GH200 Grace Hopper Superchip product page and datasheet "
    "(nvidia.com/en-us/data-center/grace-hopper-superchip): NVLink-C2C 900 GB/s, 96 GB HBM3 "
    "4 TB/s or 144 GB HBM3e 4.9 TB/s"
)
GH200 = GPU(
    "GH200",
    96 * GB,
    4.0 * TB,
    900 * GB,
    128 * GB,
    989 * TFLOPS,
    _GH200_PAGE,
    host_link_bidir_bytes_per_s=900 * GB,
    host_link="NVLink-C2C",
)
GH200_144GB = GPU(
    "GH200 144GB",
    144 * GB,
    4.9 * TB,
    900 * GB,
    128 * GB,
    989 * TFLOPS,
    _GH200_PAGE,
    host_link_bidir_bytes_per_s=900 * GB,
    host_link="NVLink-C2C",
)
A100_80GB = GPU("A100 80GB SXM", 80 * GB, 2.039 * TB, 600 * GB, 64 * GB, 312 * TFLOPS, _A100_PAGE)
A100_40GB = GPU("A100 40GB SXM", 40 * GB, 1.555 * TB, 600 * GB, 64 * GB, 312 * TFLOPS, _A100_PAGE)
#: The PCIe A100s: NVLink only through a bridge between two cards (600 GB/s).
A100_80GB_PCIE = GPU(
    "A100 80GB PCIe", 80 * GB, 1.935 * TB, 600 * GB, 64 * GB, 312 * TFLOPS, _A100_PAGE
)
A100_40GB_PCIE = GPU(
    "A100 40GB PCIe", 40 * GB, 1.555 * TB, 600 * GB, 64 * GB, 312 * TFLOPS, _A100_PAGE
)
#: Blackwell (NVLink 5: 1.8 TB/s per GPU both ways). B200 in an HGX/DGX B200 server: 180 GB of
#: HBM3e at 8 TB/s, 2.25 PFLOPS dense fp16/bf16 (4.5 with sparsity); host and NICs on PCIe Gen5.
B200 = GPU(
    "B200",
    180 * GB,
    8.0 * TB,
    1800 * GB,
    128 * GB,
    2250 * TFLOPS,
    "NVIDIA DGX B200 datasheet (nvidia.com/en-us/data-center/dgx-b200): 8 GPUs, 1,440 GB HBM3e, "
    "64 TB/s, 14.4 TB/s NVLink, 72 PFLOPS fp8 training",
)
#: One Blackwell GPU of a GB200 NVL72 rack: 72 GPUs in one NVLink domain, 13.4 TB of HBM3e at
#: 576 TB/s and 130 TB/s of NVLink in all (186 GB, 8 TB/s, 1.8 TB/s per GPU), 360 PFLOPS fp16
#: with sparsity (2.5 dense per GPU); the NICs hang off the Grace CPU's PCIe Gen5.
GB200 = GPU(
    "GB200 (NVL72)",
    186 * GB,
    8.0 * TB,
    1800 * GB,
    128 * GB,
    2500 * TFLOPS,
    "NVIDIA GB200 NVL72 product page (nvidia.com/en-us/data-center/gb200-nvl72)",
)
L4 = GPU("L4", 24 * GB, 300 * GB, None, 64 * GB, 121 * TFLOPS, "NVIDIA L4 datasheet")
T4 = GPU(
    "T4",
    16 * GB,
    320 * GB,
    None,
    32 * GB,
    65 * TFLOPS,
    "NVIDIA T4 datasheet (mixed-precision peak)",
)

GPUS = {
    g.name: g
    for g in (
        H100_SXM,
        H100_PCIE,
        H100_NVL,
        H200,
        B200,
        GB200,
        A100_80GB,
        A100_40GB,
        A100_80GB_PCIE,
        A100_40GB_PCIE,
        L4,
        T4,
    )
}

#: Line rates are what links are built for; copies get less. Two H100 SXM GPUs copying over
#: NVLink (CUDA's p2pBandwidthLatencyTest) reach about 380 of the 450 GB/s one way
#: (NVIDIA/nccl issue 1264), about 84 %.
H100_NVLINK_ACHIEVED_ONE_WAY_BYTES_PER_S = 380 * GB
NVLINK_ACHIEVED_SOURCE = "NVIDIA/nccl issue 1264: H100 SXM p2p copies, 380 of 450 GB/s one way"

#: NVLink per generation, per GPU, both directions together (vendor figures; one way is half):
#: NVLink 3 (A100) 600 GB/s, NVLink 4 (H100, H200) 900 GB/s, NVLink 5 (B200, GB200) 1.8 TB/s.
NVLINK_GENERATIONS = {
    "NVLink 3 (A100)": 600 * GB,
    "NVLink 4 (H100, H200)": 900 * GB,
    "NVLink 5 (B200, GB200)": 1800 * GB,
}
NVLINK_SOURCE = "NVIDIA NVLink and NVLink Switch page (nvidia.com/en-us/data-center/nvlink)"


@dataclass(frozen=True)
class NVLinkDomain:
    """A set of GPUs joined all-to-all over NVLink (NVSwitch), with the GPU it is built from."""

    name: str
    gpus: int
    gpu: GPU

    @property
    def one_way_bytes_per_s(self) -> float:
        bw = self.gpu.nvlink_one_way_bytes_per_s
        if bw is None:  # every domain below is built from NVLink GPUs
            raise ValueError(f"{self.gpu.name} has no NVLink")
        return bw


#: The domains the book compares: an HGX H100 server (8 GPUs, NVLink 4), an HGX B200 server
#: (8, NVLink 5) and a GB200 NVL72 rack (72, NVLink 5). A TP-8 prefill and a TP-8 decode replica
#: (16 GPUs) share a domain only in the rack.
NVLINK_DOMAINS = {
    d.name: d
    for d in (
        NVLinkDomain("HGX H100 server", 8, H100_SXM),
        NVLinkDomain("HGX B200 server", 8, B200),
        NVLinkDomain("GB200 NVL72 rack", 72, GB200),
    )
}

#: GPUs that share one NVLink domain (all-to-all over NVSwitch): an HGX H100 or H200 server's 8,
#: a GB200 NVL72 rack's 72. A transfer between two TP-8 servers stays on NVLink only inside a
#: domain that holds both, so not inside one HGX server.
NVLINK_DOMAIN_GPUS = {"HGX H100 / H200 server": 8, "GB200 NVL72 rack": 72}

#: One 400 Gb/s NDR InfiniBand NIC per GPU, the book's assumption: 400e9 / 8 = 50 GB/s one way.
NIC_NDR_BYTES_PER_S = 400e9 / 8
NIC_SOURCE = "NVIDIA ConnectX-7 / NDR InfiniBand: 400 Gb/s per port, per direction"


def find_gpu(device_name: str) -> GPU | None:
    """The entry for a name the driver reports (``torch.cuda.get_device_name``, ``nvidia-smi``).

    The names carry the form factor and memory: 'NVIDIA A100-SXM4-40GB' (Colab's A100),
    'NVIDIA A100-SXM4-80GB', 'NVIDIA A100 80GB PCIe', 'NVIDIA A100-PCIE-40GB',
    'NVIDIA H100 80GB HBM3' (SXM), 'NVIDIA H100 PCIe', 'NVIDIA H100 NVL', 'NVIDIA H200',
    'NVIDIA L4', 'Tesla T4', 'NVIDIA B200', 'NVIDIA GB200', 'NVIDIA GH200 480GB' (96 GB of HBM3),
    'NVIDIA GH200 144G HBM3e'. None when the name matches no entry.
    """
    n = device_name.upper().replace("-", " ")
    words = n.split()
    if "GB200" in n:
        return GB200
    if "B200" in n:
        return B200
    if "GH200" in n:  # before "H200", which its name contains
        return GH200_144GB if any(w.startswith("144G") for w in words) else GH200
    if "H200" in n:
        return H200
    if "H100" in n:
        if "NVL" in words:
            return H100_NVL
        if "PCIE" in words:
            return H100_PCIE
        return H100_SXM  # 'H100 80GB HBM3', 'H100 SXM5 80GB'
    if "A100" in n:
        big = "80GB" in words
        if "PCIE" in words:
            return A100_80GB_PCIE if big else A100_40GB_PCIE
        return A100_80GB if big else A100_40GB
    if "L4" in words:
        return L4
    if "T4" in words:
        return T4
    return None
