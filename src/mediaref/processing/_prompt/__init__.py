"""Prompt updates, from a model's declaration to each item's placeholder in the token ids.

The modules, in the order a request meets them (the public names are re-exported by
:mod:`mediaref.processing.prompt_updates`):

* :mod:`.details`: what an update looks for (``PromptIndex`` positions) and puts in
  (``PromptUpdateDetails``, with its ``is_embed`` selector), as plain picklable values;
* :mod:`.updates`: the updates a model declares (``PromptReplacement``, ``PromptInsertion``) and
  their per-item resolution (``ResolvedPromptUpdate``, which the processor cache stores);
* :mod:`.codec`: prompt pieces between text and token ids, cached per tokenizer;
* :mod:`.matching`: finding a target in time linear in the prompt (Knuth-Morris-Pratt);
* :mod:`.placement`: the one left-to-right walk that places updates, or finds contents already
  placed;
* :mod:`.placeholders`: vLLM's token-level functions and ``PlaceholderFeaturesInfo``;
* :mod:`.apply`: applying a request's updates, with the decoded-text fallback.

Every search is linear in the prompt, so long adversarial prompts cost no more than long ones.
"""
