"""bench/grpo_bench.py's TRL system: the same GRPO step (one problem, GROUP completions, our sandbox's pass rate
as the reward, the same LoRA, lengths and sampling) through TRL's GRPOTrainer, in its own worker process
(`grpo_bench.py --worker trl`, run by the python of --trl-python). TRL is a bench dependency only
(bench/requirements.txt), never the product's.
"""
import os
import tempfile
import time

from forced_lengths import force_lengths_on_generate


def worker_trl(a, w) -> dict:
    """The same work through TRL's GRPOTrainer; a callback times each optimisation step. w: grpo_bench's settings
    of the work (group, beta, temperature, top_p, lr, lora_r, lora_alpha, sandbox_timeout_s, natural: the natural
    lengths or None, peak_memory_gib: its measure), handed over so that this file needs nothing from it."""
    import torch
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    import coder
    import data
    import sandbox
    from infra import models

    problem = data.load("train")[0]

    def reward(prompts, completions, **kwargs):  # conversational: completions[i] = [{"role", "content"}]
        jobs = [problem.sandbox_job(coder.program(problem, coder.extract_code(c[-1]["content"])), w.sandbox_timeout_s)
                for c in completions]
        return [r.pass_rate for r in sandbox.run_many(jobs, workers=os.cpu_count())]

    steps, cpu, tokens = [], [], []

    class Timer(TrainerCallback):
        def on_step_begin(self, args, state, control, **kw):
            self.t, self.c = time.perf_counter(), time.process_time()

        def on_step_end(self, args, state, control, **kw):
            steps.append(time.perf_counter() - self.t)
            cpu.append(time.process_time() - self.c)

        def on_log(self, args, state, control, logs=None, **kw):  # logging_steps=1: one log per step
            if logs and "completions/mean_length" in logs:
                tokens.append(logs["completions/mean_length"] * w.group)

    n = a.warmup + a.steps
    natural = a.lengths == "natural"
    dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16}.get(a.dtype, torch.float32)
    with tempfile.TemporaryDirectory() as out:
        config = GRPOConfig(
            output_dir=out, num_generations=w.group, per_device_train_batch_size=w.group, gradient_accumulation_steps=1,
            max_completion_length=a.code_tokens, generation_kwargs={"min_new_tokens": 0 if natural else a.code_tokens},
            beta=w.beta, num_iterations=1, temperature=w.temperature, top_p=w.top_p, learning_rate=w.lr,
            use_cpu=a.device == "cpu", bf16=dtype == torch.bfloat16, fp16=False, report_to="none", logging_steps=1, max_steps=n,
            save_strategy="no", disable_tqdm=True, seed=0, model_init_kwargs={"dtype": dtype})
        trainer = GRPOTrainer(
            model=models.resolve(a.model), reward_funcs=reward, args=config,
            train_dataset=Dataset.from_list([{"prompt": coder.messages(problem, None)}] * n),
            peft_config=LoraConfig(r=w.lora_r, lora_alpha=w.lora_alpha, target_modules=models.LORA_TARGETS,
                                   task_type="CAUSAL_LM"),
            callbacks=[Timer()])
        if natural:
            force_lengths_on_generate(trainer.model, w.natural, trainer.processing_class.eos_token_id)
        weights_dtype = str(next(trainer.model.get_base_model().parameters()).dtype).removeprefix("torch.")
        trainer.train()
    return dict(step_s=steps[a.warmup:], cpu_s=cpu[a.warmup:], tokens=tokens[a.warmup:], phases=[], peak_rss_gib=w.peak_memory_gib(a.device),
                dtype=weights_dtype)
