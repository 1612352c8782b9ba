"""Sesame CSM (backbone + depth decoder over Mimi codes): config, model, loader, prompts, sampling, reference loop."""
