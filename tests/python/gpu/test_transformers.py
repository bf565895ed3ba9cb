"""The transformers backend on small random-weight models of several
families: logits against eager attention (float32, so the comparison is
tight) on every unpadded position, and greedy generation, which runs the
decode steps, token for token. Padding masks, GQA, sliding windows, the soft
cap, sinks and MLA's 48/32 head dims are among them."""

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
if not torch.cuda.is_available():
    pytest.skip("no CUDA device", allow_module_level=True)

import fsdpa  # noqa: E402

if not fsdpa.backend_built("cuda"):
    pytest.skip("the library is built without the CUDA backend", allow_module_level=True)

import fsdpa.integrations.transformers as fsdpa_hf  # noqa: E402

COMMON = dict(vocab_size=512, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
              num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256)
FAMILIES = {
    "llama": ("LlamaConfig", dict()),
    "qwen3-d72": ("Qwen3Config", dict(head_dim=72)),
    "mistral-window": ("MistralConfig", dict(sliding_window=8)),
    "gemma2-softcap-window": ("Gemma2Config", dict(head_dim=96, query_pre_attn_scalar=96,
                                                   attn_logit_softcapping=50.0,
                                                   final_logit_softcapping=30.0,
                                                   sliding_window=8)),
    "gemma3-window": ("Gemma3TextConfig", dict(head_dim=64, query_pre_attn_scalar=64,
                                               sliding_window=8,
                                               layer_types=["sliding_attention",
                                                            "full_attention"])),
    "gpt-oss-sinks": ("GptOssConfig", dict(head_dim=64, num_local_experts=4,
                                           num_experts_per_tok=2, sliding_window=8,
                                           layer_types=["sliding_attention",
                                                        "full_attention"])),
    "deepseek-v3-mla": ("DeepseekV3Config", dict(q_lora_rank=None, kv_lora_rank=32,
                                                 qk_nope_head_dim=32, qk_rope_head_dim=16,
                                                 v_head_dim=32, n_routed_experts=4,
                                                 num_experts_per_tok=2, moe_intermediate_size=64,
                                                 first_k_dense_replace=1, n_group=1, topk_group=1,
                                                 num_key_value_heads=4)),
}


# transformers applies its sdpa support check to every name containing
# "sdpa", so models that opt out of sdpa (gpt-oss: sinks) load fsdpa under a
# name without it.
NAME_WITHOUT_SDPA = "fused_attention"


@pytest.fixture(scope="module", autouse=True)
def registered():
    assert fsdpa_hf.register() == "fsdpa"
    assert fsdpa_hf.register(NAME_WITHOUT_SDPA) == NAME_WITHOUT_SDPA


def models(family):
    config_name, extra = FAMILIES[family]
    config_class = getattr(transformers, config_name, None)
    if config_class is None:
        pytest.skip(f"transformers {transformers.__version__} has no {config_name}")
    config = config_class(**{**COMMON, **extra})
    torch.manual_seed(0)
    eager = transformers.AutoModelForCausalLM.from_config(config, attn_implementation="eager")
    name = "fsdpa" if getattr(eager, "_supports_sdpa", True) else NAME_WITHOUT_SDPA
    ours = transformers.AutoModelForCausalLM.from_config(config, attn_implementation=name)
    ours.load_state_dict(eager.state_dict())
    return (eager.to("cuda", torch.float32).eval(), ours.to("cuda", torch.float32).eval())


def batch():
    generator = torch.Generator().manual_seed(1)
    ids = torch.randint(3, 512, (2, 24), generator=generator)
    mask = torch.ones_like(ids)
    mask[1, :5] = 0  # left padding on the second row
    return ids.cuda(), mask.cuda()


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_logits_match_eager(family):
    eager, ours = models(family)
    ids, mask = batch()
    with torch.no_grad():
        want = eager(input_ids=ids, attention_mask=mask).logits
        got = ours(input_ids=ids, attention_mask=mask).logits
    keep = mask.bool()
    torch.testing.assert_close(got[keep], want[keep], atol=2e-4, rtol=2e-4)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_greedy_generation_agrees(family):
    eager, ours = models(family)
    ids, mask = batch()
    settings = dict(attention_mask=mask, max_new_tokens=8, do_sample=False, pad_token_id=0)
    with torch.no_grad():
        want = eager.generate(ids, **settings)
        got = ours.generate(ids, **settings)
    assert torch.equal(got, want)
