"""The demo target: the scripted travel assistant, with 50 ms of simulated model time per run."""

from evalpipe.targets.demo import travel_agent

agent = travel_agent(latency=0.05)
