"""Example verifiers trainer for configs/verifiers-grpo.yaml; cw mounts its config at $CW_CONFIG."""

import os

import verifiers as vf
import yaml

config = yaml.safe_load(open(os.environ["CW_CONFIG"]))
model, tokenizer = vf.get_model_and_tokenizer(config["model"])
env = vf.load_environment(env_id=config["environment"])
args = vf.grpo_defaults(run_name=os.environ.get("HOSTNAME", "cw"))
args.output_dir = config["output_dir"]
args.max_steps = config.get("max_steps", args.max_steps)
args.vllm_server_host = config["vllm_server_host"]
args.vllm_server_port = config["vllm_server_port"]
trainer = vf.GRPOTrainer(model=model, processing_class=tokenizer, env=env, args=args)
trainer.train()
