"""A port of GPT-J's model-parallel transformer (kingoflolz/mesh-transformer-jax @ f8315e3,
``mesh_transformer/{transformer_shard,layers,util}.py``) from JAX's ``xmap`` to
named_axes: same axis names (``shard``, ``batch``), same xmaps and specs, same
collectives and custom-VJP pair.  ``python examples/gptj/train.py --steps 20`` trains a
tiny one on ``examples/data/sonnets.txt``; ``jax_reference.py`` is the same program in
plain JAX 0.4.30 (the oracle of ``tests/test_gptj_port.py``); ``reference.py`` the same
model in plain torch, without named axes.
"""
