"""Multimodal processing: hashing and cache eligibility of parsed inputs, the HF processor, fields."""
