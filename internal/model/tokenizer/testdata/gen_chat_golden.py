"""Renders chat_golden.json: the chat prompts the Hugging Face templates give.

Usage (needs only jinja2, e.g. Debian python3-jinja2):
    python3 gen_chat_golden.py > chat_golden.json

The environment is the one transformers' apply_chat_template compiles
templates in (sandboxed, trim_blocks, lstrip_blocks, loopcontrols,
raise_exception), with the special tokens of the model family.
llama2 and llama3 are the chat_template strings of meta-llama/Llama-2-13b-chat-hf
and meta-llama/Meta-Llama-3-8B-Instruct; chatml is the generic ChatML template;
vicuna transliterates FastChat's vicuna_v1.1 conversation
(SeparatorStyle.ADD_COLON_TWO, sep " ", sep2 "</s>"), which has no HF template.
"""

import json
import sys

import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment

VICUNA_SYSTEM = (
    "A chat between a curious user and an artificial intelligence assistant. "
    "The assistant gives helpful, detailed, and polite answers to the user's questions."
)

TEMPLATES = {
    "llama2": (
        {"bos_token": "<s>", "eos_token": "</s>"},
        "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}{% set system_message = messages[0]['content'] %}{% else %}{% set loop_messages = messages %}{% set system_message = false %}{% endif %}{% for message in loop_messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if loop.index0 == 0 and system_message != false %}{% set content = '<<SYS>>\\n' + system_message + '\\n<</SYS>>\\n\\n' + message['content'] %}{% else %}{% set content = message['content'] %}{% endif %}{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ ' '  + content.strip() + ' ' + eos_token }}{% endif %}{% endfor %}",
    ),
    "llama3": (
        {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"},
        "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}",
    ),
    "chatml": (
        {"eos_token": "<|im_end|>"},
        "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}",
    ),
    "vicuna": (
        {"bos_token": "<s>", "eos_token": "</s>"},
        "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}{% set system_message = messages[0]['content'] %}{% else %}{% set loop_messages = messages %}{% set system_message = '"
        + VICUNA_SYSTEM.replace("'", "\\'")
        + "' %}{% endif %}{{ system_message + ' ' }}{% for message in loop_messages %}{% if loop.index0 % 2 == 0 %}{% set role = 'USER' %}{% set sep = ' ' %}{% else %}{% set role = 'ASSISTANT' %}{% set sep = eos_token %}{% endif %}{% if message['content'] %}{{ role + ': ' + message['content'] + sep }}{% else %}{{ role + ':' }}{% endif %}{% endfor %}{% if add_generation_prompt %}{{ 'ASSISTANT:' }}{% endif %}",
    ),
}

CONVERSATIONS = [
    (True, [{"role": "user", "content": "Hello!"}]),
    (
        True,
        [
            {"role": "system", "content": "You are a pirate."},
            {"role": "user", "content": "Hi there"},
            {"role": "assistant", "content": "Arr, hello."},
            {"role": "user", "content": "  Where is the gold?\n"},
        ],
    ),
    (False, [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": " 4 "}]),
    (True, [{"role": "system", "content": ""}, {"role": "user", "content": "日本語 🦙"}]),
    (False, [{"role": "user", "content": "multi\nline\n\n"}]),
]


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def main():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
    env.globals["raise_exception"] = raise_exception
    out = []
    for name, (tokens, source) in TEMPLATES.items():
        template = env.from_string(source)
        for gen, msgs in CONVERSATIONS:
            text = template.render(messages=msgs, add_generation_prompt=gen, **tokens)
            out.append({"template": name, "add_generation_prompt": gen, "messages": msgs, "text": text})
    json.dump(out, sys.stdout, ensure_ascii=False, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
