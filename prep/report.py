"""The conversion report: a JSON summary and a PNG heat map of effective rank by layer and head."""
import json

from hs_prep.architecture import AttentionGeometry


def layer_rows(section: dict) -> list[dict]:
    """One summary row per layer, in original group numbering (what a person reading weights expects)."""
    rows = []
    for index, layer in enumerate(section["layers"]):
        perm, flags = layer["permutation"], layer["is_retrieval"]
        ranks = layer["head_effective_rank"]
        rows.append({
            "layer": index,
            "retrieval_groups": sorted(g for g, r in zip(perm, flags) if r),
            "streaming_groups": sorted(g for g, r in zip(perm, flags) if not r),
            "min_rank": min(ranks),
            "max_rank": max(ranks),
        })
    return rows


def summary(section: dict, geo: AttentionGeometry) -> dict:
    all_ranks = [r for layer in section["layers"] for r in layer["head_effective_rank"]]
    retrieval = sum(layer["num_retrieval"] for layer in section["layers"])
    total = geo.num_kv_heads * geo.num_layers
    return {
        "model_type": geo.model_type,
        "layers": geo.num_layers,
        "query_heads": geo.num_heads,
        "kv_groups": geo.num_kv_heads,
        "head_dim": geo.head_dim,
        "metric": section["metric"],
        "aggregate": section["aggregate"],
        "selection": section.get("selection", "aoh"),
        "retrieval_ratio_requested": section["retrieval_ratio"],
        "retrieval_ratio_effective": retrieval / total,
        "tp_size": section["tp_size"],
        "effective_rank_range": [min(all_ranks), max(all_ranks)],
        "rope_spearman_mean": section.get("rope_aware", {}).get("spearman_vs_vanilla_mean"),
        "per_layer": layer_rows(section),
    }


def write_report(section: dict, geo: AttentionGeometry, json_path: str, png_path: str) -> None:
    with open(json_path, "w") as f:
        json.dump(summary(section, geo), f, indent=2)
        f.write("\n")
    write_heatmap(section, geo, png_path)


def write_heatmap(section: dict, geo: AttentionGeometry, png_path: str) -> None:
    from matplotlib.figure import Figure  # the object API: no global pyplot state, safe off the main thread
    from matplotlib.patches import Rectangle

    ranks = [layer["head_effective_rank"] for layer in section["layers"]]
    fig_w = max(4.0, 0.35 * geo.num_heads + 2)
    fig_h = max(3.0, 0.22 * geo.num_layers + 1.5)
    fig = Figure(figsize=(fig_w, fig_h), dpi=100)
    ax = fig.add_subplot()
    image = ax.imshow(ranks, aspect="auto", cmap="viridis", interpolation="nearest")
    r = geo.heads_per_group
    for index, layer in enumerate(section["layers"]):
        for group, is_retrieval in zip(layer["permutation"], layer["is_retrieval"]):
            if is_retrieval:
                ax.add_patch(Rectangle((group * r - 0.5, index - 0.5), r, 1, fill=False, edgecolor="red", lw=1))
    ax.set_xlabel(f"query head (original order; {r} per KV group)")
    ax.set_ylabel("layer")
    ax.set_title(f"AoH {section['metric']} ({section['aggregate']}); red = retrieval group", fontsize=9)
    fig.colorbar(image, ax=ax, label="effective rank")
    fig.tight_layout()
    fig.savefig(png_path)
