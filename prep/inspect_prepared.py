"""hs-prep inspect: the per-layer retrieval/streaming split of a prepared checkpoint."""
from hs_prep.architecture import read_geometry
from hs_prep.checkpoint import load_config
from hs_prep.errors import PrepError
from hs_prep.report import summary


def inspect(prepared_path: str) -> dict:
    config = load_config(prepared_path)
    section = config.get("hierasparse")
    if section is None:
        raise PrepError(f"{prepared_path} is not prepared (run: hs-prep convert MODEL --output DIR)")
    return summary(section, read_geometry(config))


def format_table(report: dict) -> str:
    lines = [
        f"{report['model_type']}: {report['layers']} layers, {report['query_heads']} query heads, "
        f"{report['kv_groups']} KV groups, d_head {report['head_dim']}; metric {report['metric']} "
        f"({report['aggregate']}), retrieval ratio {report['retrieval_ratio_effective']:.3f}, tp {report['tp_size']}",
        f"{'layer':>5}  {'retrieval groups':<24} {'streaming groups':<24} {'eff. rank min..max':>18}",
    ]
    for row in report["per_layer"]:
        lines.append(
            f"{row['layer']:>5}  {','.join(map(str, row['retrieval_groups'])):<24} "
            f"{','.join(map(str, row['streaming_groups'])):<24} {row['min_rank']:>8.2f}..{row['max_rank']:<8.2f}"
        )
    return "\n".join(lines)
