"""Tiny trace files in every supported format (written into tmp_path by the tests).

A uniquely named module rather than conftest.py so that ``from workload_fixtures
import ...`` can never pick up another test folder's conftest.
"""

from __future__ import annotations

import json

AZURE_TEXT = """TIMESTAMP,ContextTokens,GeneratedTokens
2023-11-16 18:15:46.6805900,374,44
2023-11-16 18:15:50.9951690,396,109
2023-11-16 18:15:51.2224670,879,55
2023-11-16 18:15:51.3910170,91,16
2023-11-16 18:16:02.5000000,1200,0
"""

# Prefix blocks 0-3 are shared by rows 1-2 and 0-1 by rows 1-3: 6 of 45 blocks reused.
_MOONCAKE_ROWS = [
    {"timestamp": 0, "input_length": 6955, "output_length": 52, "hash_ids": list(range(14))},
    {"timestamp": 0, "input_length": 6472, "output_length": 26, "hash_ids": [0, 1, 2, 3, *range(14, 23)]},
    {"timestamp": 1500, "input_length": 8338, "output_length": 8, "hash_ids": [0, 1, *range(23, 38)]},
    {"timestamp": 2750, "input_length": 100, "output_length": 300, "hash_ids": [38]},
]
MOONCAKE_TEXT = "".join(json.dumps(row) + "\n" for row in _MOONCAKE_ROWS)

BURSTGPT_TEXT = """Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type
5,ChatGPT,472,18,490,Conversation log
45,ChatGPT,1087,0,1087,Conversation log
118,GPT-4,417,217,634,Conversation log
122.5,ChatGPT,1360,0,1360,API log
140,ChatGPT,0,30,30,API log
211,GPT-4,1009,343,1352,Conversation log
"""

PLAIN_CSV_TEXT = """arrival_s,input_tokens,output_tokens
10.0,100,20
10.5,200,40
12.25,300,60
"""

# Two clients, six 10-minute windows; client 0 is Gamma, client 1 Weibull, with idle windows.
CHUNK_0_TEXT = """0,5.0,1.2,Gamma,0.6944444444444444,0.288
600,5.0,1.2,Gamma,0.6944444444444444,0.288
1200,0,0,,0,0
1800,2.0,1.0,Gamma,1.0,0.5
2400,0,0,,0,0
3000,5.0,1.2,Gamma,0.6944444444444444,0.288
"""
CHUNK_1_TEXT = """0,2.0,1.3,Weibull,0.8,0.45
600,0,0,,0,0
1200,2.0,1.3,Weibull,0.8,0.45
1800,2.0,1.3,Weibull,0.8,0.45
2400,0,0,,0,0
3000,0,0,,0,0
"""

TOTAL_RATE_TEXT = """window_start_s,total_rate_rps,active_clients
0,10.0,3
600,0.0,0
1200,20.0,4
"""

LENGTHS_TEXT = """num_prefill_tokens,num_decode_tokens,num_total_tokens,pd_ratio
74,918,992,0.08
290,905,1195,0.32
1402,0,1402,inf
2497,918,3415,2.72
"""
